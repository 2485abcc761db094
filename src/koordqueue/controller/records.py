"""What the controller remembers of each QueueUnit and each job between events, in one
record per object, made when first written and dropped in one place when the object is
deleted (Records.forget_unit, Records.forget_job); the suspensions owed to jobs; the
units backing off; the recent decisions the dashboard shows."""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import Any

from koordqueue.engine import Engine

RECENT_DECISIONS = 50


@dataclass(slots=True)
class UnitRecord:
    """One QueueUnit's: what we wrote of it and when."""

    rv: str | None = None  # the latest resourceVersion we know of (our own writes' included)
    written_message: str | None = None  # its status.message as we last wrote or read it
    message_written_at: float | None = None  # when we last wrote why it waits
    deferred_message: str | None = None  # kept until the unit may be told again (messages.py)
    deferred_due: float = 0.0  # when it may be
    failed_scheduling_at: float | None = None  # when its last FailedScheduling event was sent
    created_at: float | None = None  # when we created it, until our watch brings it

    def finished(self) -> None:
        """Its job ended: no more messages for it."""
        self.message_written_at = None
        self.deferred_message = None


@dataclass(slots=True)
class JobRecord:
    """One job's (keyed kind/namespace/name)."""

    fingerprint: int | None = None  # what its view was made from (informers.py)
    resumed_at: float | None = None  # when we resumed it, until its view shows it
    # Our last write of its suspension that landed: (suspended by it, the resourceVersion it wrote).
    written: tuple[bool, str] | None = None
    owed: int | None = None  # the token of a suspension owed (OwedSuspensions)
    warned_of_classes: tuple[str, ...] | None = None  # the missing PriorityClasses it was told of
    warned_of_claims: tuple[str, ...] | None = None  # the missing ResourceClaim(Template)s it was told of
    told_name_taken: str | None = None  # the job whose unit has its unit's name, as it was told
    # (the admission, its admitted_at; since when) our resumes of it have failed
    resume_failing: tuple[float | None, float] | None = None
    told_priority_cap: int | None = None  # the quota's max-priority its priority was told capped at


def _rv(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def older(rv: str | None, than: str | None) -> bool | None:
    """Whether resourceVersion ``rv`` is older than ``than`` (kube-apiserver's are etcd's
    revisions, integers that only grow); None when either is missing or not an integer."""
    if not rv or not than or not rv.isdigit() or not than.isdigit():
        return None
    return int(rv) < int(than)


class Records:
    def __init__(self) -> None:
        self.units: dict[str, UnitRecord] = {}
        self.jobs: dict[str, JobRecord] = {}
        # Waiting units' new messages, not yet written: the message writer takes them all at
        # each flush (a work list, but a unit's entry goes with the rest of its record).
        self.pending_messages: dict[str, str] = {}

    def unit(self, key: str) -> UnitRecord | None:
        return self.units.get(key)

    def unit_to_write(self, key: str) -> UnitRecord:
        record = self.units.get(key)
        if record is None:
            record = self.units[key] = UnitRecord()
        return record

    def job(self, item: str) -> JobRecord | None:
        return self.jobs.get(item)

    def job_to_write(self, item: str) -> JobRecord:
        record = self.jobs.get(item)
        if record is None:
            record = self.jobs[item] = JobRecord()
        return record

    def forget_unit(self, key: str) -> None:
        """The QueueUnit was deleted: all we kept of it goes."""
        self.units.pop(key, None)
        self.pending_messages.pop(key, None)

    def forget_job(self, item: str) -> None:
        """The job was deleted: all we kept of it goes (a suspension owed included)."""
        self.jobs.pop(item, None)

    def rv(self, key: str) -> str | None:
        record = self.units.get(key)
        return record.rv if record is not None else None

    def newer(self, key: str, rv: str) -> bool:
        """Whether ``rv`` of the unit is at least as new as the latest we know of (ours included)."""
        mine = self.rv(key)
        return mine is None or _rv(rv) >= _rv(mine)

    def saw(self, key: str, rv: str) -> None:
        """Remember ``rv`` as the unit's latest, if it is."""
        if self.newer(key, rv):
            self.unit_to_write(key).rv = rv

    def written_message(self, key: str) -> str | None:
        record = self.units.get(key)
        return record.written_message if record is not None else None


class OwedSuspensions:
    """The jobs whose unit we sent back (preempted, timed out) and whose suspension we have
    not written since: such a job may still run from before, whatever our views say (they
    may not show the send-back yet, nor our own resume of the job). Its unit is not admitted
    again before that suspension is written. Each debt has a token: a suspension written
    pays only the debt it was sent for, not one owed anew while it was on its way."""

    def __init__(self, records: Records) -> None:
        self._records = records
        self._tokens = 0  # handed out so far

    def owe(self, item: str) -> None:
        self._tokens += 1
        self._records.job_to_write(item).owed = self._tokens

    def token(self, item: str) -> int | None:
        record = self._records.job(item)
        return record.owed if record is not None else None

    def __contains__(self, item: str) -> bool:
        return self.token(item) is not None

    def paid(self, item: str, token: int) -> None:
        """A suspension sent while ``token`` was owed has landed."""
        record = self._records.job(item)
        if record is not None and record.owed == token:
            record.owed = None

    def forgive(self, item: str) -> None:
        """The job ended: it runs no more."""
        record = self._records.job(item)
        if record is not None:
            record.owed = None


class Backoffs:
    """Units backing off, by when they are to be looked at again (earliest first)."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, str]] = []

    def push(self, at: float, key: str) -> None:
        heapq.heappush(self.heap, (at, key))

    def next_at(self) -> float | None:
        return self.heap[0][0] if self.heap else None

    def pop_due(self, now: float) -> str | None:
        """The next unit due by ``now``, if any."""
        if self.heap and self.heap[0][0] <= now:
            return heapq.heappop(self.heap)[1]
        return None


class RecentDecisions:
    """The last decisions (admitted, preempted, sent back, finished, deleted), for the dashboard."""

    def __init__(self) -> None:
        self.entries: deque[dict[str, Any]] = deque(maxlen=RECENT_DECISIONS)

    def remember(self, now: float, what: str, unit: str, quota: str | None, message: str) -> None:
        self.entries.appendleft({"time": now, "what": what, "unit": unit, "quota": quota, "message": message})

    def deleted(self, engine: Engine, now: float, key: str, what: str) -> None:
        """A unit the engine still had leaves: its quota (if admitted) is freed, or its place in line."""
        known = engine.unit(key)
        if known is None:
            return  # already gone (the job's deletion took its unit with it), or finished
        quota = known.admitted_quota
        self.remember(now, "deleted", key, quota, f"{what}; quota {quota} released" if quota
                      else f"{what}; it left the queue")
