"""Which QueueUnits stand for a job of ours: bare units (queued on their own) and orphans
(waiting for a job that is not there). Read by the informers and the state loader alike."""

from __future__ import annotations

from collections.abc import Container, Mapping

from koordqueue.controller.views import ORPHAN, UnitView, adapter_of_kind


def orphan_reason(unit: UnitView, jobs: Mapping[str, Container[str]]) -> str | None:
    """Why a unit stands for no job we queue (made by hand, for a kind not queued, or
    naming a job whose unit is another): such a unit waits and is never admitted nor
    accounted as holding quota, or anyone who may create a QueueUnit could hold quota (or
    jump the queue, or borrow another job's quota) with no job of its own.
    ``jobs``: by kind, the keys (namespace/name) of the jobs there are."""
    known = jobs.get(unit.consumer_kind)
    job = f"{unit.consumer_kind or 'consumer'} {unit.namespace}/{unit.consumer_name or '(unnamed)'}"
    if known is None:
        return f"{ORPHAN} this controller queues ({job})"
    own = adapter_of_kind(unit.consumer_kind).unit_name_for(unit.consumer_name)
    if unit.name != own:
        return f"{ORPHAN}: the QueueUnit of {job} is {own}"
    if f"{unit.namespace}/{unit.consumer_name}" not in known:
        return f"{ORPHAN}: {job} does not exist"
    return None


def is_bare(unit: UnitView, jobs: Mapping[str, Container[str]]) -> bool:
    """Whether no job of ours stands behind the unit, nor may: its consumer is of a kind this
    controller does not queue, or the unit is not named as that job's own unit would be (a
    Koord-Queue job extension's, a platform's, one made by hand). Such a unit is queued on its
    own (views.bare_unit_info). A unit named as a job of ours would name its unit, whose job
    does not exist (yet, or any more), is not bare: it waits for that job."""
    if jobs.get(unit.consumer_kind) is None:
        return True
    return unit.name != adapter_of_kind(unit.consumer_kind).unit_name_for(unit.consumer_name)


BARE_OFF = "bare QueueUnits are not queued here (--no-bare-queue-units)"
