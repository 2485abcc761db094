"""Block, Priority and Intelligent on the cluster decide as the simulator predicts:
the same trace through `koord-queue simulate` and through the running system admits
the same jobs in the same waves (a wave: the admissions between two job completions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordqueue.api import constants as c

from .conftest import System, pytorch_job, quota

pytestmark = pytest.mark.timeout(180)

# (name, GPUs, priority, runtime in seconds or None for forever); every job arrives at t=0.
# "first" runs, "big" does not fit beside it, "small" would: Priority lets small pass,
# Block makes it wait for big; Intelligent (threshold 4) holds low-band small back while
# a high-band big waits (intelligent-high), but serves the low band like Priority when
# the big one waiting is itself low-band (intelligent-low).
def jobs_of(big_priority: int) -> list[tuple[str, int, int, float | None]]:
    return [("first", 6, 10, 4.0), ("big", 4, big_priority, None), ("small", 2, 2, None), ("tiny", 1, 1, None)]


SCENARIOS = {  # quota name -> (policy, jobs, the waves the policy's rules say)
    "block": ("Block", jobs_of(9), {"first": 0, "big": 1, "small": 1, "tiny": 1}),
    "priority": ("Priority", jobs_of(9), {"first": 0, "small": 0, "big": 1, "tiny": 1}),
    "intelligent-high": ("Intelligent", jobs_of(9), {"first": 0, "big": 1, "small": 1, "tiny": 1}),
    "intelligent-low": ("Intelligent", jobs_of(3), {"first": 0, "small": 0, "big": 1, "tiny": 1}),
}
SCENARIO_NAMES = tuple(SCENARIOS)


def trace(scenario: str) -> dict[str, Any]:
    policy, job_list, _ = SCENARIOS[scenario]
    name = scenario
    jobs = []
    for job_name, gpus, priority, runtime in job_list:
        entry: dict[str, Any] = {"at": 0, "manifest": pytorch_job(f"{name}-{job_name}", gpus_per_pod=gpus,
                                                                  workers=0, priority=priority, quota_name=name)}
        if runtime is not None:
            entry["runtime"] = runtime
        jobs.append(entry)
    return {"objects": [quota(name, 8, 8, policy=policy)], "jobs": jobs, "until": 60}


def waves_in_simulation(tmp_path: Path, scenario: str) -> dict[str, int]:
    path = tmp_path / f"{scenario}.yaml"
    path.write_text(yaml.safe_dump(trace(scenario)))
    out = subprocess.run([sys.executable, "-m", "koordqueue.cli", "simulate", str(path), "--json"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    jobs = json.loads(out)["jobs"]
    finished = sorted(j["finished"] for j in jobs if j["finished"] is not None)
    return {j["name"]: sum(1 for f in finished if f <= j["admitted"])
            for j in jobs if j["admitted"] is not None}


def waves_on_cluster(system: System, scenario: str) -> dict[str, int]:
    name = scenario
    decisions = sorted(system.controller.recent, key=lambda d: d["time"])
    waves: dict[str, int] = {}
    finished = 0
    for decision in decisions:
        unit = decision["unit"].partition("/")[2]
        if not unit.startswith(f"{name}-"):
            continue
        if decision["what"] == "finished":
            finished += 1
        elif decision["what"] == "admitted":
            waves[unit.removesuffix(f"-{c.UNIT_SUFFIX_PYTORCH}")] = finished
    return waves


async def test_the_three_policies_admit_in_the_waves_the_simulator_predicts(system: System, tmp_path: Path) -> None:
    predicted = {policy: waves_in_simulation(tmp_path, policy) for policy in SCENARIO_NAMES}
    for scenario, (_, _, meant) in SCENARIOS.items():  # the simulator follows the rules...
        assert predicted[scenario] == {f"{scenario}-{job}": wave for job, wave in meant.items()}, scenario
    for policy in SCENARIO_NAMES:
        objects = trace(policy)
        await system.apply(*objects["objects"])
    for policy in SCENARIO_NAMES:
        jobs = trace(policy)["jobs"]
        for entry in jobs:
            manifest = entry["manifest"]
            if "runtime" in entry:
                manifest["metadata"]["annotations"][c.ANNOTATION_SIM_DURATION] = str(entry["runtime"])
        await system.apply(*[entry["manifest"] for entry in jobs])

    async def settled() -> bool:
        observed = {policy: waves_on_cluster(system, policy) for policy in SCENARIO_NAMES}
        return all(len(observed[p]) == len(predicted[p]) for p in SCENARIO_NAMES)

    await system.wait_for(settled, timeout=60, what="every predicted admission")
    for policy in SCENARIO_NAMES:  # ...and the cluster does what the simulator predicts
        assert waves_on_cluster(system, policy) == predicted[policy], policy
