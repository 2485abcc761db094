"""The chaos run, scaled down for CI: 300 PyTorchJobs over 20 quotas (4 parents), 5 % of
API requests failing (500, 429 with Retry-After, 409 on writes), watches dropped every
few seconds, history compacted (410), and the controller SIGKILLed 3 times and started
again. The checker replays every write of the API server (bench/chaos.py says what it
asserts); the full run is `python bench/chaos.py` (2,000 jobs, 10 kills).

The seed is fixed so CI is repeatable; KQ_CHAOS_SEED=N picks another (the figures,
printed with -s or on failure, name the seed to replay).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import load_chaos

pytestmark = pytest.mark.timeout(300)
SEED = int(os.environ.get("KQ_CHAOS_SEED", "20240607"))


async def test_chaos_run_keeps_every_invariant(tmp_path: Path) -> None:
    chaos = load_chaos()
    config = chaos.ChaosConfig(jobs=300, quotas=20, parents=4, kills=3, seed=SEED, runtime=(0.3, 2.0),
                               submit_per_second=25.0, tail_runtime=6.0, timeout=200.0,
                               state_dir=tmp_path, verbose=False, lease=(3.0, 2.0, 0.5))
    report = await chaos.ChaosRun(config).run()
    figures = report.figures()
    print(figures)
    assert report.violations == [], figures
    # The storm happened: every kind of fault, every kill, and work on every quota.
    assert report.faults["sigkill"] == 3 and report.restarts == 3, figures
    for kind in ("500", "429", "409", "watch drops", "compactions"):
        assert report.faults[kind] > 0, f"no {kind} injected\n{figures}"
    assert 0.03 < sum(report.faults[k] for k in ("500", "429", "409")) / report.requests < 0.07, figures
    assert report.jobs == 320 and report.releases >= 320, figures
    assert report.suspensions > 0, "no preemption happened: the run did not exercise it\n" + figures
    assert max(report.peak_gpus[f"org-{p}"] for p in range(4)) == 24, figures  # parents filled up to max
