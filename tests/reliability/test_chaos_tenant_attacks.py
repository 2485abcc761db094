"""The chaos run's tenant attacks (bench/chaos.py --tenant-attacks, issue 29): every attack,
each in a leaf quota of its own (bench/chaos.py's TENANT_QUOTAS, so that each is judged
alone), beside one small storm (a workload, injected API errors, dropped watches), judged by the
checker: no quota's bound pods past its max for longer than the bound, non-preemptible
units within min, and jobs behind a never-fit one admitted. The full soak runs them with
kills: `bench/chaos.py --tenant-attacks`.

Each failed before issue 29's fixes (scale-up and a Job 'owned' by a queued job got past
the max). A Job 'owned' by a PyTorchJob that does not exist is taken away by the garbage
collector before its pods are bound here.

All six run in one storm, as `bench/chaos.py --tenant-attacks` runs them: one storm per
attack took six times the start-up and the 15 s each attack watches its quota (about
20 s each, 2 min in all, at load 8), for the same checks on the same leaves.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import load_chaos

pytestmark = pytest.mark.timeout(300)

ATTACKS = load_chaos().ATTACKS


async def test_no_tenant_attack_gets_past_a_max_or_a_min(tmp_path: Path) -> None:
    chaos = load_chaos()
    config = chaos.ChaosConfig(jobs=30, quotas=4, parents=2, kills=0, error_rate=0.02, seed=20261206,
                               runtime=(0.3, 1.0), submit_per_second=25.0, tail_runtime=3.0, timeout=240.0,
                               state_dir=tmp_path, verbose=False, lease=(3.0, 2.0, 0.5), tenant_attacks=True,
                               attacks=ATTACKS, attack_every=(0.5, 1.0), over_max_bound=10.0)
    report = await chaos.ChaosRun(config).run()
    figures = report.figures()
    print(figures)
    for attack in ATTACKS:
        assert report.faults[f"attack: {attack}"] == 1, f"the attack {attack} was not made\n{figures}"
    assert report.violations == [], figures
