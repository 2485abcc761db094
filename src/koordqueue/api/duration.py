"""The value of our duration annotation (`koord-queue.sim/duration`): seconds, or a number with a unit;
and the RFC 3339 times a pod's status gives its runs.

Here, beside the annotation's name, because two parts read both: the simulated kubelet ends a
pod when its time is up, and the API server's pod logs write a simulated run of that length.
"""

from __future__ import annotations

import re
from datetime import datetime

DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"\s*(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(?P<unit>ms|s|m|h)?\s*")


def parse_duration(text: str) -> float:
    """Seconds from `"90"`, `"1.5"`, `"500ms"`, `"30s"`, `"2m"` or `"1h"`; ValueError if none of those."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration (examples: 30, 1.5, 500ms, 30s, 2m, 1h)")
    return float(match["number"]) * DURATION_UNITS[match["unit"] or "s"]


def parse_rfc3339(text: object) -> float | None:
    """Seconds since the epoch, or None when absent or unreadable (a field is a tenant's input)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
