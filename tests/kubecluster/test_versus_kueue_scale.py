"""bench/versus_kueue_scale.py in small on the real control plane: ours and Kueue each start on
Jobs made before them (a restart's situation: jobs listed, not watched), make their record of
every one, admit exactly one wave (one job per leaf), and after a restart with every leaf's
quota raised, the next wave. Skipped where Kueue is not built (as test_versus_kueue.py).
Speed is not checked: figures are for bench/."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from koordqueue.realcluster import kueue

BENCH = Path(__file__).parents[2] / "bench" / "versus_kueue_scale.py"
JOBS, QUOTAS = 60, 20
pytestmark = [pytest.mark.kube, pytest.mark.timeout(900),
              pytest.mark.skipif(kueue.may_skip(), reason="Kueue is not built (make e2e-kueue; make test-versus-kueue builds it and sets "
                                                           "KOORD_QUEUE_REQUIRE_KUEUE=1: never skipped there)")]


def number(value: Any) -> bool:
    return isinstance(value, int | float) and not math.isnan(value)


def test_both_systems_take_over_pending_jobs_and_admit_one_wave_per_start() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--jobs", str(JOBS), "--quotas", str(QUOTAS), "--json",
                           "--timeout", "300"], capture_output=True, text=True, timeout=850)
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    f = json.loads(done.stdout)
    assert [r["system"] for r in f["runs"]] == ["ours", "kueue"]
    for run in f["runs"]:
        name = run["system"]
        assert run["jobs_created"] == JOBS and run["leaves"] == QUOTAS, (name, run)
        first, restart = run["first_start"], run["restart"]
        # Every job made before the controller started got its QueueUnit / Workload.
        assert first["records_made"] == JOBS, (name, first)
        for p in (first, restart):
            assert p["admitted"] == p["expected"] == QUOTAS and p["over_nominal"] == 0, (name, p)
            for key in ("ready_s", "first_admission_s", "wave_s", "controller_peak_rss", "cycles"):
                assert number(p[key]) and p[key] >= 0, (name, key, p[key])
            assert p["controller_peak_rss"] > 0 and p["cycles"] > 0, (name, p)
