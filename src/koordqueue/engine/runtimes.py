"""How long a job is expected to run, for the start-time forecast (forecast.py), and where
that figure comes from: the job's own annotation (``koord-queue/expected-runtime``), else
what jobs of the same kind took before (a bounded history per quota and job-name
pattern, in memory), else a default. ``max-exec-time-seconds`` bounds each of them: past it
the job is stopped anyway. Pure: the shell reads the annotation and says when jobs end.
"""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from dataclasses import dataclass

from koordqueue.api.constants import (
    ANNOTATION_EXPECTED_RUNTIME,
    BASIS_ANNOTATION,
    BASIS_DEFAULT,
    BASIS_HISTORY,
    DEFAULT_EXPECTED_RUNTIME_SECONDS,
)
from koordqueue.api.duration import parse_duration

HISTORY_PER_KEY = 20  # runs kept per (quota, pattern): the median of these is the estimate
HISTORY_KEYS = 2000  # (quota, pattern) pairs kept; the least recently used goes first
MAX_EXPECTED_SECONDS = 366 * 86400.0  # a longer annotation is refused: no forecast is that far

# A job's name less what tells runs apart: a trailing number or hash (train-7f9c2, run-12,
# sweep-20261206-1532): "train-", "run-", "sweep-".
_RUN_SUFFIX = re.compile(r"([-_.]?([0-9]+|[0-9a-f]{5,}))+$")


@dataclass(frozen=True, slots=True)
class Runtime:
    """A job's expected runtime in seconds, where it comes from, and its maximum (None: none)."""

    seconds: float
    basis: str
    max_seconds: float | None = None


def name_pattern(name: str) -> str:
    """The job-name pattern its history is kept under (``train-7f9c2`` -> ``train-``)."""
    stripped = _RUN_SUFFIX.sub("", name)
    return stripped or name


def parse_expected_runtime(text: str) -> tuple[float | None, str | None]:
    """The annotation's seconds, or None and why it is ignored (a tenant's text: never raises)."""
    try:
        seconds = parse_duration(text)
    except ValueError as err:
        return None, f"annotation {ANNOTATION_EXPECTED_RUNTIME} ignored: {err}"
    if not seconds > 0 or seconds > MAX_EXPECTED_SECONDS:
        return None, (f"annotation {ANNOTATION_EXPECTED_RUNTIME} ignored: {text!r} is not a runtime between "
                      f"0 s and {MAX_EXPECTED_SECONDS / 86400:g} days")
    return seconds, None


class RuntimeBook:
    """The runtimes jobs took, by (quota, job-name pattern): bounded in keys and in runs per key."""

    def __init__(self, default_seconds: float = DEFAULT_EXPECTED_RUNTIME_SECONDS) -> None:
        self.default_seconds = default_seconds
        self._runs: OrderedDict[tuple[str, str], deque[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._runs)

    def copy(self) -> RuntimeBook:
        """An independent copy (a dry run reads it in a thread while the loop records)."""
        new = RuntimeBook(self.default_seconds)
        new._runs = OrderedDict((key, deque(runs, maxlen=runs.maxlen)) for key, runs in self._runs.items())
        return new

    def record(self, quota: str, name: str, seconds: float) -> None:
        """A job of ``quota`` named ``name`` ran ``seconds`` (start to its end)."""
        if not (0 < seconds <= MAX_EXPECTED_SECONDS):
            return
        key = (quota, name_pattern(name))
        runs = self._runs.get(key)
        if runs is None:
            runs = self._runs[key] = deque(maxlen=HISTORY_PER_KEY)
            while len(self._runs) > HISTORY_KEYS:
                self._runs.popitem(last=False)
        else:
            self._runs.move_to_end(key)
        runs.append(seconds)

    def history(self, quota: str | None, name: str) -> float | None:
        """The median of what jobs like it took in ``quota`` (None: none seen)."""
        if quota is None:
            return None
        runs = self._runs.get((quota, name_pattern(name)))
        if not runs:
            return None
        ordered = sorted(runs)
        return ordered[len(ordered) // 2]

    def estimate(self, quota: str | None, name: str, annotated: float | None,
                 max_seconds: float | None) -> Runtime:
        """The annotation's figure, else the history's, else the default; never past ``max_seconds``."""
        if annotated is not None:
            seconds, basis = annotated, BASIS_ANNOTATION
        elif (seen := self.history(quota, name)) is not None:
            seconds, basis = seen, BASIS_HISTORY
        else:
            seconds, basis = self.default_seconds, BASIS_DEFAULT
        if max_seconds is not None and max_seconds > 0:
            seconds = min(seconds, max_seconds)
        return Runtime(seconds, basis, max_seconds if max_seconds and max_seconds > 0 else None)
