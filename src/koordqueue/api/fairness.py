"""The fairness-over-weeks annotations of an ElasticQuota, read (docs/fairness.md).

``koord-queue/budget: "nvidia.com/gpu=2000h/720h"``: at most 2,000 GPU-hours in any 720
hours; several resources comma-separated; ``;exempt-min`` after one: a job that keeps its
quota within min is not held to it. Amounts and windows are durations as
``api/duration.py`` reads them (``90``, ``30s``, ``2m``, ``1h``); the amount is resource
times that duration (``2000h`` of GPUs: 2,000 GPU-hours). Every value is a tenant's input:
a bad one raises ValueError saying what is wrong, and the quota is read without it.
"""

from __future__ import annotations

from dataclasses import dataclass

from koordqueue.api.constants import BUDGET_EXEMPT_MIN, FAIR_SHARING_NONE, FAIR_SHARING_USAGE_HISTORY
from koordqueue.api.duration import parse_duration

MAX_BUDGETS = 16  # resources one quota may budget
MIN_WINDOW_SECONDS = 60.0  # the history's resolution
MAX_WINDOW_SECONDS = 366 * 86400.0
MIN_HALF_LIFE_SECONDS = 60.0
MAX_HALF_LIFE_SECONDS = 366 * 86400.0


@dataclass(frozen=True, slots=True)
class Budget:
    """``amount`` milli-unit-seconds of ``resource`` in any ``window`` seconds."""

    resource: str
    amount: int
    window: float
    exempt_min: bool = False

    def describe(self) -> str:
        """As the annotation writes it."""
        amount = _duration(self.amount / 1000)
        flag = f";{BUDGET_EXEMPT_MIN}" if self.exempt_min else ""
        return f"{self.resource}={amount}/{_duration(self.window)}{flag}"


def _duration(seconds: float) -> str:
    """In the largest unit that keeps it short: 7200 -> 2h, 240 -> 4m, 90 -> 90s."""
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and (seconds / size).is_integer():
            return f"{seconds / size:g}{unit}"
    return f"{seconds / 3600:g}h" if seconds >= 3600 else f"{seconds:g}s"


def parse_budgets(text: str) -> tuple[Budget, ...]:
    """The budgets of ``koord-queue/budget``; ValueError (why, in words) for any bad part."""
    out: list[Budget] = []
    seen: set[str] = set()
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise ValueError("empty; write e.g. nvidia.com/gpu=2000h/720h")
    if len(parts) > MAX_BUDGETS:
        raise ValueError(f"{len(parts)} budgets; at most {MAX_BUDGETS}")
    for part in parts:
        spec, _, flag = part.partition(";")
        flag = flag.strip()
        if flag and flag != BUDGET_EXEMPT_MIN:
            raise ValueError(f"{part!r}: unknown flag {flag!r} (known: {BUDGET_EXEMPT_MIN})")
        resource, equals, amounts = spec.partition("=")
        resource = resource.strip()
        amount_text, slash, window_text = amounts.partition("/")
        if not equals or not slash or not resource:
            raise ValueError(f"{part!r} is not resource=AMOUNT/WINDOW, e.g. nvidia.com/gpu=2000h/720h")
        if resource in seen:
            raise ValueError(f"{resource} budgeted twice")
        seen.add(resource)
        try:
            hours = parse_duration(amount_text)
            window = parse_duration(window_text)
        except ValueError as err:
            raise ValueError(f"{part!r}: {err}") from None
        if not MIN_WINDOW_SECONDS <= window <= MAX_WINDOW_SECONDS:
            raise ValueError(f"{part!r}: the window must be from 1m to {MAX_WINDOW_SECONDS / 86400:g} days")
        amount = int(hours * 1000)  # milli-units of the resource times seconds
        if amount <= 0:
            raise ValueError(f"{part!r}: the amount must be positive")
        out.append(Budget(resource, amount, window, flag == BUDGET_EXEMPT_MIN))
    return tuple(out)


def parse_fair_sharing(text: str) -> bool:
    """``koord-queue/fair-sharing``: whether by usage history; ValueError for another value."""
    value = text.strip()
    if value == FAIR_SHARING_USAGE_HISTORY:
        return True
    if value == FAIR_SHARING_NONE:
        return False
    raise ValueError(f"{text!r}: known values are {FAIR_SHARING_USAGE_HISTORY} and {FAIR_SHARING_NONE}")


def parse_half_life(text: str) -> float:
    """``koord-queue/usage-half-life`` in seconds; ValueError outside 1m to a year."""
    seconds = parse_duration(text)
    if not MIN_HALF_LIFE_SECONDS <= seconds <= MAX_HALF_LIFE_SECONDS:
        raise ValueError(f"{text!r}: a half-life must be from 1m to {MAX_HALF_LIFE_SECONDS / 86400:g} days")
    return seconds


__all__ = ["Budget", "parse_budgets", "parse_fair_sharing", "parse_half_life"]
