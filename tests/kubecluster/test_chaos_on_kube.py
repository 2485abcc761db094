"""The chaos run on the real control plane, scaled for the suite: 150 PyTorchJobs over 8
quotas (2 parents) whose pods the real training operator makes and kwok runs, the
controller SIGKILLed twice and kube-apiserver SIGKILLed and started again once (etcd
keeps the state). The checker reads every write from etcd's own history (bench/chaos.py
says what it asserts); the full run is `python bench/chaos.py --control-plane kube`.

The seed is fixed so that the storm is the same each time; KQ_CHAOS_SEED=N picks another.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.reliability.conftest import load_chaos

pytestmark = [pytest.mark.kube, pytest.mark.timeout(480)]
SEED = int(os.environ.get("KQ_CHAOS_SEED", "20261204"))


async def test_chaos_on_the_real_control_plane_keeps_every_invariant(tmp_path: Path) -> None:
    chaos = load_chaos()
    config = chaos.ChaosConfig(control_plane="kube", jobs=150, quotas=8, parents=2, kills=2, apiserver_restarts=1,
                               seed=SEED, runtime=(0.3, 2.0), submit_per_second=25.0, tail_runtime=4.0,
                               timeout=300.0, state_dir=tmp_path, verbose=False, lease=(6.0, 4.0, 1.0))
    report = await chaos.ChaosRun(config).run()
    figures = report.figures()
    print(figures)
    assert report.violations == [], figures
    # The storm happened: every kill, the restart, and the checker saw the jobs' pods too.
    assert report.faults["sigkill"] == 2 and report.restarts == 2, figures
    assert report.faults["apiserver restarts"] == 1, figures
    assert report.jobs == 158 and report.releases >= 158 and report.admissions >= 158, figures
    assert report.pods >= 158, figures  # each job's Master at least, as etcd stored them
    assert report.used_checked > 0, figures
    assert max(report.peak_gpus[f"org-{p}"] for p in range(2)) > 0, figures
