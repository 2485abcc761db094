"""The chaos run's tenant attacks (bench/chaos.py --tenant-attacks, issue 29): each attack
beside a small storm (a workload, injected API errors, dropped watches), judged by the
checker: no quota's bound pods past its max for longer than the bound, non-preemptible
units within min, and jobs behind a never-fit one admitted. The full soak runs them with
kills: `bench/chaos.py --tenant-attacks`.

Each failed before issue 29's fixes (scale-up and a Job 'owned' by a queued job got past
the max). A Job 'owned' by a PyTorchJob that does not exist is taken away by the garbage
collector before its pods are bound here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import load_chaos

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

ATTACKS = load_chaos().ATTACKS


@pytest.mark.parametrize("attack", ATTACKS)
async def test_a_tenant_attack_gets_past_no_max_and_no_min(tmp_path: Path, attack: str) -> None:
    chaos = load_chaos()
    config = chaos.ChaosConfig(jobs=30, quotas=4, parents=2, kills=0, error_rate=0.02, seed=20261206,
                               runtime=(0.3, 1.0), submit_per_second=25.0, tail_runtime=3.0, timeout=240.0,
                               state_dir=tmp_path, verbose=False, lease=(3.0, 2.0, 0.5), tenant_attacks=True,
                               attacks=(attack,), attack_every=(0.5, 1.0), over_max_bound=10.0)
    report = await chaos.ChaosRun(config).run()
    figures = report.figures()
    print(figures)
    assert report.faults[f"attack: {attack}"] == 1, f"the attack was not made\n{figures}"
    assert report.violations == [], figures
