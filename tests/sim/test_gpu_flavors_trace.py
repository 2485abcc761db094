"""The worked GPU-flavors trace (examples/traces/gpu-flavors.yaml, docs/gpus.md) through the
simulator: 8 of the 20 one-GPU jobs sent to the team run on the H100 node, 12 on the A100
nodes (pinned by a flavor domain); the job selecting H100 waits until an H100 job ends; the MIG
job runs at once (only one node has the slices)."""

from __future__ import annotations

from pathlib import Path

import yaml

from koordqueue.sim.simulator import simulate
from koordqueue.sim.trace import parse_trace

TRACE = Path(__file__).parents[2] / "examples" / "traces" / "gpu-flavors.yaml"


def test_the_gpu_flavors_trace() -> None:
    result = simulate(parse_trace(yaml.safe_load(TRACE.read_text())))
    jobs = {record.name: record for record in result.jobs}
    ones = [jobs[f"job-{i:02d}"] for i in range(20)]
    assert [r.quota for r in ones] == ["team-h100"] * 8 + ["team-a100"] * 12
    assert all(r.admitted == 0.0 for r in ones)
    for record in ones:
        model = "h100" if record.quota == "team-h100" else "a100"
        assert record.domains == (("master", "flavor", f"NVIDIA-{model.upper()}-"
                                   f"{'80GB-HBM3' if model == 'h100' else 'SXM4-80GB'}"),)
    picky = jobs["picky"]
    assert (picky.quota, picky.admitted) == ("team-h100", 300.0)  # when job-00, on H100, ended
    slices = jobs["slices"]
    assert (slices.quota, slices.admitted, slices.phase) == ("team-mig", 20.0, "Succeed")
