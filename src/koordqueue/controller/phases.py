"""Every move of a QueueUnit's status.phase, in one table (as h11's ``_state.py`` gives its
transitions): on what event, from which phases, to which phase, who decides it and who
writes it. Every status write goes through unitstatus.py; the patch is made by the
status.py function named here. "Who sets Dequeued?" is answered by reading this file.

The table is checked against the code (tests/controller/test_phases.py: each writer calls
that function with that phase, every phase-writing call of the controller is a row, every
phase is reached) and docs/architecture.md's phase table is made from it (make generate).
"""

from __future__ import annotations

from dataclasses import dataclass

from koordqueue.api.constants import PHASES_FINISHED, PHASES_HOLDING_QUOTA, Phase

NEW = None  # a unit with no phase yet (just created by its job's reconciler, or by hand)
WAITING = frozenset({NEW, Phase.ENQUEUED, Phase.PREEMPTED, Phase.TIMEOUT_BACKOFF})
HOLDING = PHASES_HOLDING_QUOTA
NOT_FINISHED = WAITING | HOLDING
FINISHED = PHASES_FINISHED
SENT_BACK = frozenset({Phase.PREEMPTED, Phase.TIMEOUT_BACKOFF})  # lost its admission, waits again
RUNNABLE = frozenset({Phase.DEQUEUED, Phase.RUNNING})  # a job may run while its unit is in one


@dataclass(frozen=True)
class Transition:
    event: str  # what happened, in words
    before: frozenset[Phase | None]  # the phases it moves from (NEW: none yet)
    after: Phase
    decided_by: str  # the controller file whose rule it is
    writer: str  # the controller file that writes it (through unitstatus.py)
    patch: str  # the status.py function that makes the status patch


TRANSITIONS: tuple[Transition, ...] = (
    Transition("the engine tells a new unit why it waits (its first status)", frozenset({NEW}),
               Phase.ENQUEUED, "engine/ (its message)", "messages.py", "enqueued"),
    Transition("a cycle admits it, admission checks to pass", WAITING, Phase.RESERVED,
               "engine/ (Engine.schedule)", "scheduler.py", "admitted"),
    Transition("a cycle admits it, no admission check", WAITING, Phase.DEQUEUED,
               "engine/ (Engine.schedule)", "scheduler.py", "admitted"),
    Transition("its admission checks are all Ready", frozenset({Phase.RESERVED}), Phase.DEQUEUED,
               "reconciler.py", "reconciler.py", "checks_passed"),
    Transition("its job runs", frozenset({Phase.DEQUEUED}), Phase.RUNNING,
               "reconciler.py", "reconciler.py", "running"),
    Transition("its job was running when the controller started, and fits (adopted)", frozenset({NEW}),
               Phase.RUNNING, "reconciler.py", "reconciler.py", "running"),
    Transition("a cycle picks it as a victim", HOLDING, Phase.PREEMPTED,
               "engine/ (preemption.py)", "scheduler.py", "sent_back"),
    Transition("a bare unit grew past its admission, or was made inactive", HOLDING, Phase.PREEMPTED,
               "reconciler.py", "scheduler.py", "sent_back"),
    Transition("an admission check said Retry or Rejected", frozenset({Phase.RESERVED}), Phase.TIMEOUT_BACKOFF,
               "reconciler.py", "scheduler.py", "sent_back"),
    Transition("its pods did not all run within wait-for-pods-running", frozenset({Phase.DEQUEUED}),
               Phase.TIMEOUT_BACKOFF, "reconciler.py", "scheduler.py", "sent_back"),
    Transition("its job could not be resumed for resume-refused-seconds",
               frozenset({Phase.DEQUEUED, Phase.RUNNING}), Phase.TIMEOUT_BACKOFF,
               "reconciler.py", "scheduler.py", "sent_back"),
    Transition("its job grew past its admission, was made inactive, or ran past its maximum time",
               HOLDING, Phase.ENQUEUED, "reconciler.py, lifetime.py", "scheduler.py", "sent_back"),
    Transition("its back-off is over", frozenset({Phase.PREEMPTED, Phase.TIMEOUT_BACKOFF}), Phase.ENQUEUED,
               "scheduler.py", "scheduler.py", "enqueued"),
    Transition("its job succeeded", NOT_FINISHED, Phase.SUCCEED, "reconciler.py", "reconciler.py", "finished"),
    Transition("its job failed", NOT_FINISHED, Phase.FAILED, "reconciler.py", "reconciler.py", "finished"),
)


def _phases(phases: frozenset[Phase | None]) -> str:
    if phases == NOT_FINISHED:
        return "any not finished"
    order = [NEW, *Phase]
    return ", ".join("(new)" if p is None else p.value for p in order if p in phases)


def markdown() -> str:
    """The table as docs/architecture.md shows it."""
    lines = ["| event | from | to | decided by | written by (`status.py`) |", "| --- | --- | --- | --- | --- |"]
    for t in TRANSITIONS:
        lines.append(f"| {t.event} | {_phases(t.before)} | **{t.after.value}** | `{t.decided_by}` | "
                     f"`{t.writer}` (`{t.patch}`) |")
    return "\n".join(lines)
