"""Quota usage over virtual time, kept by the simulator itself.

The simulator adds a job's request to its quota and every ancestor when the job is
admitted and takes it back when it ends or is preempted. Keeping this apart from the
engine makes "no quota ever above its max" a check of the engine, not its own claim,
and gives the time integral of usage that utilisation figures need.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from koordqueue.engine.model import QuotaInfo, ResourceList


@dataclass(slots=True)
class QuotaUsage:
    used: ResourceList = field(default_factory=dict)
    peak: ResourceList = field(default_factory=dict)
    area: dict[str, float] = field(default_factory=dict)  # integral of used over time, milli-unit seconds
    since: float = 0.0  # time of the last change, from which ``used`` holds


class UsageBook:
    def __init__(self) -> None:
        self.quotas: dict[str, QuotaUsage] = {}

    def chain(self, leaf: str, quotas: Mapping[str, QuotaInfo]) -> list[str]:
        """``leaf`` and its ancestors as the quotas say now (a cycle stops the walk)."""
        names = [leaf]
        parent = quotas[leaf].parent if leaf in quotas else None
        while parent is not None and parent not in names:
            names.append(parent)
            parent = quotas[parent].parent if parent in quotas else None
        return names

    def charge(self, names: Sequence[str], request: ResourceList, now: float, sign: int) -> None:
        """Add (``sign`` 1) or take back (-1) ``request`` on every quota of ``names``."""
        quotas = self.quotas
        for name in names:
            usage = quotas.get(name)
            if usage is None:
                usage = quotas[name] = QuotaUsage(since=now)
            elif now != usage.since:
                self._advance(usage, now)
            used, peak = usage.used, usage.peak
            for resource, amount in request.items():
                value = used.get(resource, 0) + sign * amount
                used[resource] = value
                if value > peak.get(resource, 0):
                    peak[resource] = value

    def close(self, now: float) -> None:
        """Bring every integral up to ``now`` (the end of the simulation)."""
        for usage in self.quotas.values():
            self._advance(usage, now)

    @staticmethod
    def _advance(usage: QuotaUsage, now: float) -> None:
        elapsed = now - usage.since
        if elapsed > 0:
            for resource, amount in usage.used.items():
                usage.area[resource] = usage.area.get(resource, 0.0) + amount * elapsed
        usage.since = now
