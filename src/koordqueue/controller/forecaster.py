"""The leader's start-time forecast (engine/forecast.py): recomputed in the background every
``forecast_interval_seconds``, and sooner after scheduling cycles, rate-limited (``run``);
never on the scheduling loop's time: the engine is copied on the loop (engine/forecast.py's
``snapshot`` for the fast play where it applies, else a clone), the plays run in a thread. Shown by `explain`, `status`, the
dashboard, the visibility API and a metric, and written on each waiting QueueUnit
(``status.expectedStart``, its range and basis; the EXPECTED-START column) only when it
moved materially: by more than FORECAST_WRITE_MIN_SECONDS and more than
FORECAST_WRITE_FRACTION of the wait it had (and at most FORECAST_WRITES_PER_ROUND units
per round), so a busy queue is not rewritten at every recompute.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from koordqueue.api import constants as c
from koordqueue.controller.eventline import job_ref
from koordqueue.controller.shared import Part, Shared
from koordqueue.controller.unitstatus import UnitStatusWriter
from koordqueue.controller.views import rfc3339
from koordqueue.engine import Engine
from koordqueue.engine.forecast import Forecast, Snapshot, UnitForecast, clone, forecast, snapshot
from koordqueue.engine.ledger import UnitState
from koordqueue.engine.runtimes import Runtime, RuntimeBook, parse_expected_runtime
from koordqueue.kube.errors import KubeError

log = logging.getLogger(__name__)

FORECAST_POLL_SECONDS = 1.0  # how often the loop looks whether a recompute is due
FORECAST_MIN_GAP_SECONDS = 5.0  # after a cycle, no sooner than this after the last recompute ...
FORECAST_COST_FACTOR = 10.0  # ... nor sooner than ten times what the last one took (<= 10 % of a core)
FORECAST_WRITES_PER_ROUND = 500  # units whose forecast is written per recompute at most (the rest: next round)

JobRuntime = tuple[str | None, int | None]  # a job's annotation koord-queue/expected-runtime, its max-exec-time


def estimate_runtimes(engine: Engine, book: RuntimeBook, job_of: Callable[[str], JobRuntime | None]
                      ) -> tuple[dict[str, Runtime], dict[str, str]]:
    """Every unit's expected runtime (annotation, else history, else the default; bounded by
    its max-exec-time), and why a unit's annotation was ignored (a tenant's text)."""
    runtimes: dict[str, Runtime] = {}
    problems: dict[str, str] = {}
    for key, record in engine._ledger.units.items():
        info = record.info
        job = job_of(key)
        annotated: float | None = None
        max_seconds: int | None = None
        if job is not None:
            text, max_seconds = job
            if text is not None:
                annotated, why = parse_expected_runtime(text)
                if why is not None:
                    problems[key] = why
        quota = info.admitted_quota or (record.node.name if record.node is not None else info.quota_name)
        runtimes[key] = book.estimate(quota, info.name, annotated, float(max_seconds) if max_seconds else None)
    return runtimes, problems


def run_forecast(engine: Engine | Snapshot, now: float, runtimes: Mapping[str, Runtime], default_seconds: float
                 ) -> tuple[Forecast, float]:
    """The forecast and the CPU seconds it took (in the calling thread)."""
    start = time.thread_time()
    result = forecast(engine, now, runtimes, Runtime(default_seconds, c.BASIS_DEFAULT))
    return result, time.thread_time() - start


def _minutes(seconds: float) -> str:
    minutes = seconds / 60
    if minutes < 1:
        return "under a minute"
    if minutes < 120:
        return f"{minutes:.0f} min"
    hours = minutes / 60
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} days"


def _bare_minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f}" if seconds < 7200 else _minutes(seconds)


def forecast_fields(item: UnitForecast | None) -> dict[str, Any]:
    """The forecast as explain --json and the visibility API give it: expectedStart (RFC 3339,
    null: it never starts as things are, or beyond the forecast), expectedStartRange
    ([earliest, latest], each RFC 3339 or null) and basis."""
    if item is None:
        return {c.EXPECTED_START_FIELD: None, c.EXPECTED_START_RANGE_FIELD: None, "basis": None}
    return {
        c.EXPECTED_START_FIELD: rfc3339(item.start) if item.start is not None else None,
        c.EXPECTED_START_RANGE_FIELD: [rfc3339(item.earliest) if item.earliest is not None else None,
                                       rfc3339(item.latest) if item.latest is not None else None],
        "basis": item.basis,
        "jobsEndingFirst": item.ahead,
    }


def forecast_words(item: UnitForecast | None, now: float) -> str:
    """"expected to start in about 25 min (between 10 and 70): 3 jobs ahead of it end by then"."""
    if item is None:
        return "no forecast yet"
    if item.start is None:
        if item.basis == c.BASIS_BEYOND:
            return f"not expected to start within the forecast's horizon ({_minutes(c.FORECAST_HORIZON_SECONDS)})"
        return "not expected to start as things are: it cannot fit even when every running job has ended"
    wait = max(0.0, item.start - now)
    low = max(0.0, (item.earliest if item.earliest is not None else item.start) - now)
    span = (f"between {_bare_minutes(low)} and {_bare_minutes(item.latest - now)}" if item.latest is not None
            else f"at the earliest in {_minutes(low)}")
    jobs = "job ahead of it ends" if item.ahead == 1 else "jobs ahead of it end"
    ends = f": {item.ahead} {jobs} by then" if item.ahead else ""
    head = "expected to start now" if wait < 60 else f"expected to start in about {_minutes(wait)}"
    return f"{head} ({span}; runtimes from {item.basis}){ends}"


def material(old: float | None, new: float | None, now: float) -> bool:
    """Whether a written expected start moved enough to be written again."""
    if old is None or new is None:
        return (old is None) != (new is None)
    moved = abs(new - old)
    return moved > c.FORECAST_WRITE_MIN_SECONDS and moved > c.FORECAST_WRITE_FRACTION * max(0.0, old - now)


_UNWRITTEN = object()


class Forecaster(Part):
    """Keeps ``current`` (the last forecast) and writes its changes on the waiting units."""

    def __init__(self, shared: Shared, status: UnitStatusWriter, cycles: Callable[[], int] = lambda: 0) -> None:
        super().__init__(shared)
        self.status = status
        self.cycles = cycles  # scheduling cycles run so far (the scheduler's count)
        self.current: Forecast | None = None
        self.problems: dict[str, str] = {}  # unit -> why its annotation was ignored
        self.written: dict[str, float | None] = {}  # unit -> the expected start last written on it
        self.writes = 0  # forecast writes made (tests count them)
        self.noted: dict[str, str | None] = {}  # unit -> the forecastNote last written on it
        self.told: dict[str, str] = {}  # unit -> the annotation problem its job was told of (one event each)

    def job_runtime(self, key: str) -> JobRuntime | None:
        unit = self.informers.unit.get(key)
        job = self.informers.job_of(unit) if unit is not None else None
        return None if job is None else (job.expected_runtime, job.max_execution_seconds)

    def of(self, key: str) -> UnitForecast | None:
        return self.current.units.get(key) if self.current is not None else None

    async def run(self) -> None:
        """Recompute every ``forecast_interval_seconds``, and sooner (FORECAST_MIN_GAP_SECONDS
        after the last, or ten times as long as the last took, whichever is more) once a
        scheduling cycle ran since: the forecast follows what happens, at a bounded cost."""
        interval = self.config.forecast_interval_seconds
        if interval <= 0:
            return
        loop = asyncio.get_running_loop()
        last, seen, took = loop.time(), -1, 0.0
        while True:
            await asyncio.sleep(min(interval, FORECAST_POLL_SECONDS))
            now, cycles = loop.time(), self.cycles()
            gap = max(min(interval, FORECAST_MIN_GAP_SECONDS), FORECAST_COST_FACTOR * took)
            if now - last < interval and (cycles == seen or now - last < gap):
                continue
            last, seen = now, cycles
            try:
                await self.refresh()
                took = loop.time() - now
            except asyncio.CancelledError:
                raise
            except Exception:  # a forecast is advice: it never takes the controller down
                log.exception("the start-time forecast failed; next try in %s s", interval)

    async def refresh(self) -> Forecast:
        """Forecast from the engine as it is now (copied here, played in a thread), then write
        what moved. The copy: the fast play's snapshot where it applies, else a clone."""
        now = self.clock()
        snap = snapshot(self.engine)
        base: Engine | Snapshot = snap if snap is not None else clone(self.engine)
        runtimes, problems = estimate_runtimes(self.engine, self.shared.runtimes, self.job_runtime)
        result, cpu = await asyncio.to_thread(run_forecast, base, now, runtimes,
                                              self.config.default_expected_runtime_seconds)
        self.current, self.problems = result, problems
        self._tell(problems)
        self.metrics.forecast_duration.set(cpu)
        self._drain(result, now)
        await self._write(result, now)
        return result

    def _tell(self, problems: dict[str, str]) -> None:
        """A Warning event on the job once per bad expected-runtime annotation (its unit's
        status.forecastNote says it too, with the forecast)."""
        for key in [k for k in self.told if k not in problems]:
            del self.told[key]
        for key, why in problems.items():
            if self.told.get(key) == why:
                continue
            unit = self.informers.unit.get(key)
            job = self.informers.job_of(unit) if unit is not None else None
            if job is not None:
                self.told[key] = why
                self.shared.events.emit(job_ref(job), c.EventType.WARNING, c.EventReason.INVALID_EXPECTED_RUNTIME, why)

    def _drain(self, result: Forecast, now: float) -> None:
        drains: dict[str, float] = {}
        for key, standings in self.engine.queue_positions().items():
            starts = [f.start for s in standings if (f := result.units.get(s.unit)) is not None and f.start is not None]
            drains[key] = max(starts) - now if starts else 0.0
        self.metrics.forecast_drain.clear()
        for key, seconds in drains.items():
            self.metrics.forecast_drain.labels(key).set(max(0.0, seconds))

    async def _write(self, result: Forecast, now: float) -> None:
        ledger = self.engine._ledger
        for key in [k for k in self.written if k not in result.units]:
            del self.written[key]  # admitted (its admission's write cleared the fields) or gone
            self.noted.pop(key, None)
        due = []
        for key, item in result.units.items():
            old = self.written.get(key, _UNWRITTEN)
            if old is _UNWRITTEN or material(old if isinstance(old, float) else None, item.start, now) or \
                    self.noted.get(key) != self.problems.get(key):
                due.append((key, item))
            if len(due) >= FORECAST_WRITES_PER_ROUND:
                break

        async def one(key: str, item: UnitForecast) -> None:
            record = ledger.units.get(key)

            def still() -> bool:
                current = ledger.units.get(key)
                return current is not None and current.state is not UnitState.ADMITTED

            if record is None or self.informers.unit.get(key) is None:
                return
            fields = forecast_fields(item)
            patch = {c.EXPECTED_START_FIELD: fields[c.EXPECTED_START_FIELD],
                     c.EXPECTED_START_RANGE_FIELD: [t for t in fields[c.EXPECTED_START_RANGE_FIELD] or () if t]
                     or None,
                     c.FORECAST_BASIS_FIELD: item.basis,
                     c.FORECAST_NOTE_FIELD: self.problems.get(key)}
            try:
                if await self.status.write(key, patch, touch=False, limit=self.status.message_limit, still=still):
                    self.written[key] = item.start
                    self.noted[key] = patch[c.FORECAST_NOTE_FIELD]
                    self.writes += 1
            except KubeError as err:
                log.debug("forecast of %s not written: %s", key, err)

        await asyncio.gather(*(one(key, item) for key, item in due))
