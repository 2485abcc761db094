"""What `koord-queue explain` and the dashboard say would let a job in (issue 16 item 4):
advice that can happen, counting the units ahead of it in its queue, and the reason
worked out now, not the unit's status.message (which may lag). No cluster: the engine
and the views the controller and the snapshot share."""

from __future__ import annotations

from koordqueue.controller.overview import explain
from koordqueue.controller.views import UnitView
from koordqueue.engine import Engine
from tests.engine.builders import GPU, G, engine_with, parent, quota, settle, unit


def view(engine: Engine, name: str, message: str = "", phase: str = "Enqueued") -> UnitView:
    """The unit's object as the controller's informer or a snapshot sees it."""
    info = engine.unit(f"default/{name}")
    assert info is not None
    return UnitView("default", name, "1", {}, (), phase, message, 0, info.created, None, "PyTorchJob", name,
                    dict(info.request), None)


def advice_for(engine: Engine, name: str, capacity: int | None = None) -> list[str]:
    quotas = {q.name: q for q in engine._quotas.values()}
    return explain(engine, quotas, view(engine, name), None if capacity is None else {GPU: capacity * G})["advice"]


def test_a_job_over_its_max_is_told_what_can_change_not_what_to_free() -> None:
    """12 GPUs against max 8: freeing 12 GPUs would not let it in; raising the max, or
    asking for less, would."""
    engine = engine_with(quota("team", 0, 8))
    engine.set_unit(unit("huge", 12, "team"))
    settle(engine, 0.0)
    assert advice_for(engine, "huge") == [
        "it can never fit as it is: raise the max nvidia.com/gpu of quota team to at least 12 (now 8), "
        "or ask for at most 8 nvidia.com/gpu"]


def test_over_a_parents_max_and_over_the_cluster() -> None:
    engine = engine_with(parent("pool", 0, 6), quota("a", 0, 16, "pool"), capacity=10)
    engine.set_unit(unit("huge", 12, "a"))
    settle(engine, 0.0)
    assert advice_for(engine, "huge", capacity=10) == [
        "it can never fit as it is: raise the max nvidia.com/gpu of quota pool to at least 12 (now 6), "
        "or ask for at most 6 nvidia.com/gpu",
        "it can never fit as it is: add nodes until the cluster has 12 nvidia.com/gpu to share (now 10), "
        "or ask for at most 10 nvidia.com/gpu"]


def test_what_must_be_freed_counts_the_units_ahead_in_its_queue() -> None:
    """Quota of 8, 6 used: the first waiting job (4) needs 2 freed; the one behind it
    (4 too) needs 6, since the first goes before it. A job ahead that can never fit
    takes no room and is not counted."""
    engine = engine_with(quota("team", 0, 8))
    engine.set_unit(unit("run", 6, "team"))
    settle(engine, 0.0)
    engine.set_unit(unit("never", 9, "team", priority=9, created=1))
    engine.set_unit(unit("first", 4, "team", created=2))
    engine.set_unit(unit("second", 4, "team", created=3))
    settle(engine, 3.0)
    assert advice_for(engine, "first") == ["2 nvidia.com/gpu freed in quota team (used 6 + asks 4 > max 8)"]
    assert advice_for(engine, "second") == [
        "6 nvidia.com/gpu freed in quota team (used 6 + 4 for the 1 unit ahead of it in its queue + asks 4 > max 8)"]


def test_the_reason_is_worked_out_now_not_read_from_the_unit() -> None:
    """The unit's written message says 2 were used; 4 are: explain says 4."""
    engine = engine_with(quota("team", 0, 8))
    engine.set_unit(unit("run", 2, "team"))
    settle(engine, 0.0)
    engine.set_unit(unit("big", 8, "team", created=1))
    engine.set_unit(unit("mid", 2, "team", created=2))
    settle(engine, 2.0)
    stale = "waiting for quota team: nvidia.com/gpu asks 8, used 2 of max 8"
    quotas = {q.name: q for q in engine._quotas.values()}
    why = explain(engine, quotas, view(engine, "big", message=stale), None)
    assert why["message"] == "waiting for quota team: nvidia.com/gpu asks 8, used 4 of max 8"
    assert why["advice"] == ["4 nvidia.com/gpu freed in quota team (used 4 + asks 8 > max 8)"]


def test_a_job_that_waits_out_its_victims_protect_time_is_told_time_may_let_it_in() -> None:
    """Seen on the real control plane: team-y, under its min, waits for team-x's borrowed
    room, which it takes back once team-x's jobs have run the protect time; explain said
    only what must be freed."""
    engine = engine_with(parent("pool", 8, 8), quota("a", 4, 8, "pool"), quota("b", 4, 8, "pool"),
                         protect_seconds=60.0)
    engine.set_unit(unit("b1", 8, "b"))
    settle(engine, 0.0)
    engine.set_unit(unit("a1", 4, "a", created=10))
    settle(engine, 10.0)
    assert advice_for(engine, "a1") == [
        "time may be enough: units it could preempt for room pass their protect time (60s, protectSeconds) "
        "within that from now, and it tries again as each does; or",
        "4 nvidia.com/gpu freed in quota pool (used 8 + asks 4 > max 8)"]
    engine.set_unit(unit("b2", 4, "b", created=11))  # no protect time keeps it: it only borrows
    settle(engine, 11.0)
    assert not advice_for(engine, "b2")[0].startswith("time may be enough")
