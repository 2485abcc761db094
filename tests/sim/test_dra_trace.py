"""The worked DRA trace (examples/traces/dra.yaml, docs/gpus.md "DRA") through the
simulator: jobs are charged the quota resource their claims' device class maps to, per pod;
nodes take pods only up to the devices their ResourceSlices publish; allocationMode All is
refused, and a job whose template does not exist waits, naming it."""

from __future__ import annotations

from pathlib import Path

import yaml

from koordqueue.sim.simulator import simulate
from koordqueue.sim.trace import parse_trace

TRACE = Path(__file__).parents[2] / "examples" / "traces" / "dra.yaml"


def test_the_dra_trace() -> None:
    trace = parse_trace(yaml.safe_load(TRACE.read_text()))
    assert trace.warnings == []
    jobs = {record.name: record for record in simulate(trace).jobs}
    pair, later = jobs["pair"], jobs["next"]
    assert (pair.admitted, pair.request["example.com/gpu"]) == (0.0, 4000)
    # The quota had room for "next" (4 + 2 of 6), the nodes not (1 device free on each).
    assert (later.admitted, later.request["example.com/gpu"]) == (600.0, 2000)
    assert jobs["big"].admitted is None and "no node has 4 free example.com/gpu" in (jobs["big"].message or "")
    assert "allocationMode All" in (jobs["every"].message or "")
    assert "ResourceClaimTemplate later, which does not exist" in (jobs["early"].message or "")


def test_mappings_in_a_trace_as_the_flag_and_bad_ones_warned() -> None:
    flag = parse_trace({"deviceClassMappings": "g=example.com/gpu:2@d",
                        "nodes": [{"name": "n", "allocatable": {"cpu": "1"}, "devices": {"d": 3}}]})
    assert flag.nodes[0].allocatable["example.com/gpu"] == 6000
    bad = parse_trace({"deviceClassMappings": "g=example.com/gpu:0"})
    assert bad.device_class_mappings == {} and "count per device" in bad.warnings[0]
