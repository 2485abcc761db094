"""Usage history: what each quota used over weeks, for fair sharing by history and budgets.

Per quota and resource, from the engine's accounting (what its subtree holds, as the
tree counts it), integrated exactly between the times the engine is called with (the
clock is passed in, never read):

- a *decayed sum* H = integral of used(s) * 2^(-(now - s) / half-life) ds, in milli-unit
  seconds. With tau = half-life / ln 2 it moves from t0 to t1 at a constant use r as
  H(t1) = H(t0) e^(-dt/tau) + r tau (1 - e^(-dt/tau)); a quota using r for ever tends to r tau.
- for a budgeted resource, a *window*: what it used in buckets of at least a minute (the
  history's resolution) and at most ``MAX_BUCKETS`` per window, so that a 720-hour window
  keeps 240 buckets of three hours; buckets older than the window are dropped.

Bounded: one float per quota and resource, and ``MAX_BUCKETS`` per budget. ``dump`` and
``load`` carry it across restarts (the controller keeps it in a ConfigMap).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from koordqueue.engine.model import ResourceList

LN2 = math.log(2.0)
MINUTE = 60.0  # the resolution: bucket widths and fair-sharing scores move in whole minutes
MAX_BUCKETS = 240  # per window
DUMP_VERSION = 1


@dataclass(slots=True)
class Window:
    """What was used in the last ``span`` seconds, in buckets of ``width`` seconds."""

    span: float
    width: float
    buckets: deque[list[float]] = field(default_factory=deque)  # [start, milli-unit seconds]
    total: float = 0.0

    @staticmethod
    def over(span: float) -> Window:
        width = max(MINUTE, math.ceil(span / MAX_BUCKETS / MINUTE) * MINUTE)
        return Window(span, width)

    def add(self, start: float, end: float, rate: float) -> None:
        """``rate`` used from ``start`` to ``end``."""
        if rate <= 0 or end <= start:
            return
        start = max(start, end - self.span - self.width)  # (older use ages out at once)
        buckets, width = self.buckets, self.width
        while start < end:
            origin = math.floor(start / width) * width
            stop = min(end, origin + width)
            amount = rate * (stop - start)
            if buckets and buckets[-1][0] == origin:
                buckets[-1][1] += amount
            else:
                buckets.append([origin, amount])
            self.total += amount
            start = stop

    def trim(self, now: float) -> None:
        """Drop the buckets wholly older than the window (a bucket counts until its end leaves it)."""
        buckets = self.buckets
        while buckets and buckets[0][0] + self.width + self.span <= now:
            self.total -= buckets.popleft()[1]
        if not buckets:
            self.total = 0.0

    def freed_at(self, excess: float, now: float) -> float:
        """When enough of what is in the window will have aged out of it for ``excess`` to
        fit (if nothing more is used meanwhile); ``now`` when it already does."""
        if excess <= 0:
            return now
        freed = 0.0
        for origin, amount in self.buckets:
            freed += amount
            if freed >= excess:
                return max(now, origin + self.width + self.span)
        return now + self.span


@dataclass(slots=True)
class Track:
    """One quota's history."""

    half_life: float
    rates: ResourceList = field(default_factory=dict)  # what it holds now (milli-units)
    decayed: dict[str, float] = field(default_factory=dict)  # milli-unit seconds, decayed
    windows: dict[str, Window] = field(default_factory=dict)  # by budgeted resource


class UsageHistory:
    """The history of the quotas asked for (``want``); see the module doc."""

    def __init__(self) -> None:
        self.tracks: dict[str, Track] = {}
        self.since: float | None = None  # the time integrated up to

    def want(self, name: str, half_life: float, windows: Mapping[str, float]) -> None:
        """Keep ``name``'s history with ``half_life``, and windows of these spans by resource."""
        track = self.tracks.get(name)
        if track is None:
            track = self.tracks[name] = Track(half_life)
        elif track.half_life != half_life:
            track.half_life = half_life
        for resource, span in windows.items():
            window = track.windows.get(resource)
            if window is None or window.span != span:
                fresh = Window.over(span)
                if window is not None:  # re-bucket what is kept (a budget's window was edited)
                    for origin, amount in window.buckets:
                        fresh.add(origin, origin + window.width, amount / window.width)
                track.windows[resource] = fresh
        for resource in [r for r in track.windows if r not in windows]:
            del track.windows[resource]

    def keep_only(self, names: Iterable[str]) -> None:
        """Forget the quotas not among ``names`` (deleted, or no longer asked for)."""
        keep = set(names)
        for name in [n for n in self.tracks if n not in keep]:
            del self.tracks[name]

    def advance(self, now: float) -> None:
        """Count the use since the last call, at the rates set then, up to ``now``."""
        since = self.since
        self.since = now if since is None else max(since, now)
        if since is None or now <= since:
            return
        dt = now - since
        for track in self.tracks.values():
            tau = track.half_life / LN2
            keep = math.exp(-dt / tau)
            decayed, rates = track.decayed, track.rates
            for resource in set(decayed) | set(rates):
                rate = rates.get(resource, 0)
                value = decayed.get(resource, 0.0) * keep + rate * tau * (1.0 - keep)
                if value < 1e-9 and not rate:
                    decayed.pop(resource, None)
                else:
                    decayed[resource] = value
            for resource, window in track.windows.items():
                window.add(since, now, rates.get(resource, 0))
                window.trim(now)

    def set_rates(self, name: str, used: ResourceList) -> None:
        """What ``name`` holds from now on (until the next ``advance``)."""
        track = self.tracks.get(name)
        if track is not None and track.rates != used:
            track.rates = {resource: amount for resource, amount in used.items() if amount > 0}

    def decayed(self, name: str) -> dict[str, float]:
        track = self.tracks.get(name)
        return dict(track.decayed) if track is not None else {}

    def in_window(self, name: str, resource: str) -> float:
        """What ``name`` used of ``resource`` within its window (milli-unit seconds)."""
        track = self.tracks.get(name)
        window = track.windows.get(resource) if track is not None else None
        return window.total if window is not None else 0.0

    def freed_at(self, name: str, resource: str, excess: float, now: float) -> float:
        track = self.tracks.get(name)
        window = track.windows.get(resource) if track is not None else None
        return now if window is None else window.freed_at(excess, now)

    def copy(self) -> UsageHistory:
        """An independent copy (the forecast plays a clone of the engine forward)."""
        other = UsageHistory()
        other.since = self.since
        other.tracks = {name: Track(t.half_life, dict(t.rates), dict(t.decayed),
                                    {r: Window(w.span, w.width, deque([list(b) for b in w.buckets]), w.total)
                                     for r, w in t.windows.items()})
                        for name, t in self.tracks.items()}
        return other

    # --- across restarts ------------------------------------------------------------
    def dump(self) -> dict[str, Any]:
        """A JSON-able copy (bounded as the history is)."""
        return {"version": DUMP_VERSION, "since": self.since, "quotas": {
            name: {"halfLife": track.half_life,
                   "decayed": {r: round(v, 3) for r, v in sorted(track.decayed.items())},
                   "windows": {r: {"span": w.span, "width": w.width,
                                   "buckets": [[o, round(a, 3)] for o, a in w.buckets]}
                               for r, w in sorted(track.windows.items())}}
            for name, track in sorted(self.tracks.items())}}

    def load(self, data: object) -> str | None:
        """Take a ``dump`` back (after a restart); returns why it could not, if it could not
        (it is read back by the controller: a hand-edited copy must not crash the engine)."""
        try:
            tracks = _read(data)
        except (TypeError, ValueError, KeyError, AttributeError) as err:
            return f"usage history not read back ({err}); it starts afresh"
        assert isinstance(data, Mapping)
        since = data.get("since")
        self.tracks = tracks
        self.since = float(since) if isinstance(since, (int, float)) and math.isfinite(since) else None
        return None


def _read(data: object) -> dict[str, Track]:
    if not isinstance(data, Mapping) or data.get("version") != DUMP_VERSION:
        raise ValueError("not a usage history of this version")
    tracks: dict[str, Track] = {}
    for name, item in dict(data["quotas"]).items():
        half_life = float(item["halfLife"])
        if not (math.isfinite(half_life) and half_life > 0):
            raise ValueError(f"{name}: bad half-life")
        track = Track(half_life)
        track.decayed = {str(r): _finite(v) for r, v in dict(item["decayed"]).items()}
        for resource, raw in dict(item["windows"]).items():
            window = Window.over(_finite(raw["span"]))
            for origin, amount in list(raw["buckets"])[-MAX_BUCKETS - 1:]:
                start = _finite(origin)
                window.add(start, start + window.width, _finite(amount) / window.width)
            track.windows[str(resource)] = window
        tracks[str(name)] = track
    return tracks


def _finite(value: object) -> float:
    number = float(value)  # type: ignore[arg-type]  # (a TypeError is caught by ``load``)
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{value!r} is not a non-negative number")
    return number
