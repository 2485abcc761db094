"""How accurate the start-time forecast is (engine/forecast.py), against the simulator.

Each trace is run by the simulator (the production engine on a virtual clock). At the
instant a job is submitted (after that instant's cycle), the forecast is taken from the
simulator's engine, with every job's runtime as the trace says (exact) or off by a
factor drawn in [0.5, 1.5] per job (+-50 %); later, when the simulator admits the job,
the forecast is compared with that. A job is "jumped" when a job submitted after it,
with a higher priority, in its queue, was admitted before it (the forecast cannot know
of jobs not submitted yet). Error: |forecast - actual| / actual wait, over the jobs that
waited (wait >= 1 s). A second run takes the forecast again at half and at 90 % of each
job's actual wait (same runtimes): how the error shrinks as the job nears its start.

    .venv/bin/python bench/forecast.py accuracy              # every trace below, a table
    .venv/bin/python bench/forecast.py accuracy --json

Traces: the example traces (examples/traces, but bad-input.yaml), Kueue's baseline shape
at a tenth (bench/kueue_sim.py --small: 1,500 jobs, 30 leaves), and a generated
multi-team trace with bursts (``burst_trace``: 4 teams, bursts of jobs of 10-30 min,
some urgent ones later).
"""

from __future__ import annotations

import json
import math
import random
import statistics
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from koordqueue.api.constants import (  # noqa: E402
    ANNOTATION_PRIORITY,
    ANNOTATION_QUEUE,
    BASIS_ANNOTATION,
    ELASTIC_QUOTA_KIND,
    GPU,
    KUBEFLOW_API_VERSION,
    LABEL_QUOTA_IS_PARENT,
    LABEL_QUOTA_PARENT,
    PYTORCH_JOB_KIND,
    QUOTA_API_VERSION,
    TRUE,
)
from koordqueue.engine.forecast import forecast  # noqa: E402
from koordqueue.engine.runtimes import Runtime  # noqa: E402
from koordqueue.sim.simulator import Simulator, Step, _at  # noqa: E402
from koordqueue.sim.trace import JobEntry, Trace  # noqa: E402
from koordqueue.sim.tracefile import load_trace  # noqa: E402

FOREVER = 10 * 365 * 86400.0  # a job the trace runs forever
MAX_FORECASTS = 300  # per trace and run: every k-th job is forecast beyond this many jobs
NAMESPACE = "bursts"


def _factor(key: str, spread: float) -> float:
    """A job's runtime error, fixed per job: 1 + spread x u, u uniform in [-1, 1] by its key's hash."""
    if not spread:
        return 1.0
    u = (zlib.crc32(key.encode()) % 10_000) / 5_000 - 1.0
    return 1.0 + spread * u


@dataclass
class Taken:
    at: float
    start: float | None


class ForecastingSimulator(Simulator):
    """The simulator, taking a forecast of chosen jobs at their submission (and at ``checkpoints``)."""

    def __init__(self, trace: Trace, spread: float, every: int = 1,
                 checkpoints: dict[str, list[float]] | None = None) -> None:
        super().__init__(trace)
        self.spread = spread
        self.every = every
        self.arrivals = 0
        self.fresh: list[str] = []  # unit keys submitted at this instant, to forecast
        self.checkpoints = checkpoints or {}
        self.due: dict[float, list[str]] = {}
        for key, times in self.checkpoints.items():
            for when in times:
                self.due.setdefault(_at(when), []).append(key)
        self.taken: dict[str, list[Taken]] = {}
        self.cpu_calls = 0

    def run(self):  # type: ignore[no-untyped-def]
        for when in sorted(self.due):
            self._push(when, Step.EVENT, _NOTHING)
        return super().run()

    def _event(self, event: Any) -> None:
        if event is not _NOTHING:
            super()._event(event)

    def _submit(self, obj: Any, adapter: Any, runtime: float | None, where: str) -> None:
        before = len(self.by_unit)
        super()._submit(obj, adapter, runtime, where)
        if len(self.by_unit) > before and not self.checkpoints:
            self.arrivals += 1
            if self.arrivals % self.every == 0:
                self.fresh.append(next(reversed(self.by_unit)))

    def _cycle(self) -> float | None:
        wake = super()._cycle()
        keys = [k for k in self.fresh if k not in self.taken] + [
            k for k in self.due.pop(self.now, ()) if k in self.by_unit]
        self.fresh = []
        keys = [k for k in keys if self.by_unit[k].admitted is None]
        if keys:
            runtimes = {key: Runtime((r.runtime if r.runtime is not None else FOREVER) * _factor(key, self.spread),
                                     BASIS_ANNOTATION) for key, r in self.by_unit.items()}
            result = forecast(self.engine, self.now, runtimes, Runtime(FOREVER, BASIS_ANNOTATION), coarsen=0.0,
                              resolution=0.0)
            self.cpu_calls += 1
            for key in keys:
                item = result.units.get(key)
                self.taken.setdefault(key, []).append(Taken(self.now, item.start if item else None))
        return wake


_NOTHING = object()


@dataclass
class Errors:
    values: list[float] = field(default_factory=list)
    never: int = 0  # forecast None, yet it started

    def row(self) -> dict[str, Any]:
        v = sorted(self.values)
        if not v:
            return {"jobs": 0, "never": self.never}
        p90 = v[min(len(v) - 1, math.ceil(0.9 * len(v)) - 1)]
        return {"jobs": len(v), "median": round(statistics.median(v), 3), "p90": round(p90, 3), "never": self.never}


def _jumped(records: list[Any]) -> set[str]:
    """Jobs a later job of higher priority in their queue was admitted before."""
    out: set[str] = set()
    by_queue: dict[str, list[Any]] = {}
    for r in records:
        if r.unit_key and r.admitted is not None and r.submitted is not None:
            by_queue.setdefault(r.queue or "", []).append(r)
    for items in by_queue.values():
        for r in items:
            if any(o.submitted > r.submitted and (o.priority or 0) > (r.priority or 0) and o.admitted < r.admitted
                   for o in items):
                out.add(r.unit_key)
    return out


def measure(trace_of: Any, spread: float) -> dict[str, Any]:
    """Forecast at submission, with runtimes off by up to ``spread``: error by class, and at 50 / 90 % of the wait."""
    sim = ForecastingSimulator(trace_of(), spread)
    total = sum(1 for _ in trace_of().jobs)
    sim.every = max(1, math.ceil(total / MAX_FORECASTS))
    result = sim.run()
    jumped = _jumped(result.jobs)
    classes = {"not jumped": Errors(), "jumped": Errors()}
    at_once = 0
    waits: dict[str, tuple[float, float]] = {}
    for r in result.jobs:
        if r.admitted is not None and r.submitted is not None and r.admitted - r.submitted < 1.0:
            at_once += 1
            continue
        taken = sim.taken.get(r.unit_key or "")
        if not taken or r.admitted is None or r.submitted is None:
            continue
        wait = r.admitted - r.submitted
        waits[r.unit_key] = (r.submitted, wait)  # type: ignore[index]
        errors = classes["jumped" if r.unit_key in jumped else "not jumped"]
        start = taken[0].start
        if start is None:
            errors.never += 1
        else:
            errors.values.append(abs(start - r.admitted) / wait)
    out: dict[str, Any] = {name: e.row() for name, e in classes.items()}
    out["started at once"] = at_once
    out["forecast engine plays"] = sim.cpu_calls
    # Nearing the start: forecast again at 50 % and 90 % of each job's wait.
    checkpoints = {key: [round(s + 0.5 * w, 6), round(s + 0.9 * w, 6)] for key, (s, w) in waits.items()}
    again = ForecastingSimulator(trace_of(), spread, checkpoints=checkpoints)
    rerun = again.run()
    admitted = {r.unit_key: r.admitted for r in rerun.jobs if r.unit_key}
    for index, share in enumerate(("at 50 % of the wait", "at 90 % of the wait")):
        errors = Errors()
        for key, (_, wait) in waits.items():
            taken = again.taken.get(key, [])
            actual = admitted.get(key)
            if len(taken) <= index or actual is None:
                continue
            item = taken[index]
            left = actual - item.at
            if item.start is None:
                errors.never += 1
            elif left > 0:
                errors.values.append(abs(item.start - actual) / wait)
        out[share] = errors.row()
    return out


def burst_trace(seed: int = 7, later_urgent: bool = True) -> Trace:
    """4 teams under a 32-GPU parent (min 8, max 16 each); every team submits a burst of 12
    jobs (1-4 GPUs, 10-30 min) at t=0, 20 min and 1 h; with ``later_urgent`` some urgent jobs
    (priority 10) come between the bursts and jump ahead."""
    rng = random.Random(seed)
    trace = Trace()
    trace.objects.append(_quota("pool", 32, 32, {LABEL_QUOTA_IS_PARENT: TRUE}))
    teams = [f"team-{t}" for t in "abcd"]
    for team in teams:
        trace.objects.append(_quota(team, 8, 16, {LABEL_QUOTA_PARENT: "pool"}))
    entries: list[tuple[float, float, dict[str, Any]]] = []
    for burst, at in enumerate((0.0, 1200.0, 3600.0)):
        for team in teams:
            for i in range(12):
                entries.append((at + i, float(rng.randint(600, 1800)),
                                _job(f"{team}-b{burst}-{i}", team, rng.choice((1, 2, 2, 4)), 0)))
    if later_urgent:
        for i in range(8):
            team = rng.choice(teams)
            entries.append((float(rng.randint(300, 3000)), float(rng.randint(300, 900)), _job(f"{team}-urgent-{i}", team, 2, 10)))
    entries.sort(key=lambda e: e[0])
    for at, runtime, manifest in entries:
        trace.jobs.append(JobEntry(len(trace.jobs), at, runtime, manifest))  # type: ignore[union-attr]
    return trace


def _quota(name: str, low: int, high: int, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": QUOTA_API_VERSION, "kind": ELASTIC_QUOTA_KIND,
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
            "spec": {"min": {GPU: str(low)}, "max": {GPU: str(high)}}}


def _job(name: str, team: str, gpus: int, priority: int) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox", "resources": {"requests": {GPU: str(gpus)}}}
    return {"apiVersion": KUBEFLOW_API_VERSION, "kind": PYTORCH_JOB_KIND,
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "annotations": {ANNOTATION_QUEUE: team, ANNOTATION_PRIORITY: str(priority)}},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {
                "containers": [container]}}}}}}


def traces(paths: list[str]) -> dict[str, Any]:
    import kueue_sim

    named: dict[str, Any] = {}
    for path in paths or sorted(str(p) for p in (ROOT / "examples" / "traces").glob("*.yaml")
                                if p.name != "bad-input.yaml"):
        named[Path(path).name] = lambda path=path: load_trace(path, stream=False)
    if not paths:
        named["kueue baseline / 10"] = lambda: kueue_sim.build_trace(divisor=10)
        named["bursts (4 teams, urgent later)"] = burst_trace
    return named


def accuracy_main(paths: list[str], as_json: bool) -> None:
    rows: dict[str, Any] = {}
    for name, trace_of in traces(paths).items():
        rows[name] = {"exact runtimes": measure(trace_of, 0.0), "runtimes +-50 %": measure(trace_of, 0.5)}
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    print("| trace | runtimes | class | jobs | median | p90 | no forecast |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, by_spread in rows.items():
        for spread, out in by_spread.items():
            for cls in ("not jumped", "jumped", "at 50 % of the wait", "at 90 % of the wait"):
                row = out[cls]
                if not row["jobs"] and not row["never"]:
                    continue
                print(f"| {name} | {spread} | {cls} | {row['jobs']} | {row.get('median', '-')} | "
                      f"{row.get('p90', '-')} | {row['never']} |")
            print(f"| {name} | {spread} | started at once (not counted) | {out['started at once']} | | | |")
