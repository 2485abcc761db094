"""The chaos run's tenant attacks (bench/chaos.py --tenant-attacks, issue 29): each attack
beside a small storm (a workload, injected API errors, dropped watches), judged by the
checker: no quota's bound pods past its max for longer than the bound, non-preemptible
units within min, and jobs behind a never-fit one admitted. The full soak runs them with
kills: `bench/chaos.py --tenant-attacks`.

Scale-up (item 2) and a Job 'owned' by a queued job (item 3) are fixed on other branches
of issue 29: here they still get past the max, as the checker says (xfail, strict: when
the fixes are merged these pass, and the marks go). A Job 'owned' by a PyTorchJob that
does not exist is taken away by the garbage collector before its pods are bound here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import load_chaos

pytestmark = pytest.mark.timeout(300)

FIXED_ELSEWHERE = {
    "scale-up": "issue 29 item 2 (a job grown after admission), fixed on another branch",
    "queued-owner": "issue 29 item 3 (a child of a job that holds no quota), fixed on another branch",
}
ATTACKS = [pytest.param(kind, marks=pytest.mark.xfail(reason=FIXED_ELSEWHERE[kind], strict=True))
           if kind in FIXED_ELSEWHERE else kind for kind in load_chaos().ATTACKS]


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
