"""The forecast against the simulator (bench/forecast_accuracy.py): with exact runtimes and no
job arriving later, every job's forecast start at its submission is when the simulator
admits it; with runtimes off, it is not (the comparison can tell them apart)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from forecast_accuracy import ForecastingSimulator, burst_trace  # noqa: E402


def all_at_once():  # type: ignore[no-untyped-def]
    """The generated multi-team trace (4 teams sharing a parent, 1-4 GPU jobs), every job at t=0."""
    trace = burst_trace(later_urgent=False)
    for entry in trace.jobs:  # type: ignore[union-attr]
        entry.at = 0.0
    return trace


def test_exact_runtimes_and_no_later_arrivals_give_exact_forecasts() -> None:
    sim = ForecastingSimulator(all_at_once(), spread=0.0)
    result = sim.run()
    waited = [r for r in result.jobs if r.admitted is not None and r.admitted > 0]
    assert len(waited) >= 50  # most of the 144 jobs wait behind the first ones
    for r in waited:
        (taken,) = sim.taken[r.unit_key]  # type: ignore[index]
        assert taken.at == 0.0 and taken.start == r.admitted, r.unit_key


def test_runtimes_off_by_half_make_the_forecast_err() -> None:
    sim = ForecastingSimulator(all_at_once(), spread=0.5)
    result = sim.run()
    wrong = [r for r in result.jobs if r.admitted and sim.taken[r.unit_key][0].start != r.admitted]  # type: ignore[index]
    assert len(wrong) >= 20
