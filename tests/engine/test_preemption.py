"""Reclaim of borrowed capacity, priority preemption inside a queue, and back-off
(SEMANTICS.md sections 2 and 3)."""

from __future__ import annotations

import pytest

from koordqueue.engine.backoff import backoff_seconds
from koordqueue.engine.model import EngineConfig

from .builders import engine_with, keys, parent, queue_of, quota, settle, unit, used

PROTECT = 60.0
GRACE = 30.0


def borrowed_pool(victims: list[tuple[str, int, int, float]], **config: object):  # type: ignore[no-untyped-def]
    """A pool of 8 GPUs split 4/4 between a and b; b's units, (name, GPUs, priority,
    admitted at), fill it all, so b borrows a's half."""
    engine = engine_with(parent("pool", 8, 8), quota("a", 4, 8, "pool"), quota("b", 4, 8, "pool"),
                         protect_seconds=PROTECT, **config)
    for name, gpus, priority, at in sorted(victims, key=lambda v: v[3]):
        engine.set_unit(unit(name, gpus, "b", priority=priority, created=at))
        engine.schedule(at)
    assert used(engine)["b"] == 8
    return engine


@pytest.mark.parametrize(
    ("victims", "ask", "expected"),
    [
        pytest.param([("b1", 2, 0, 0), ("b2", 2, 0, 1), ("b3", 2, 0, 2), ("b4", 2, 0, 3)], 2, ["b4"],
                     id="most-recent-first"),
        pytest.param([("b1", 2, 0, 3), ("b2", 2, 5, 2), ("b3", 2, 1, 1), ("b4", 2, 5, 0)], 4, ["b1", "b3"],
                     id="lowest-priority-first"),
        pytest.param([("b1", 4, 0, 0), ("b2", 2, 0, 1), ("b3", 2, 0, 2)], 4, ["b3", "b2"],
                     id="just-enough"),
        pytest.param([("b1", 2, 0, 0), ("b2", 1, 0, 1), ("b3", 4, 0, 2), ("b4", 1, 0, 3)], 4, ["b3"],
                     id="no-victim-that-can-be-spared"),
    ],
)
def test_reclaim_chooses_few_low_priority_recent_victims(victims, ask, expected) -> None:
    engine = borrowed_pool(victims)
    engine.set_unit(unit("a1", ask, "a", priority=0, created=100))
    result = engine.schedule(100.0)
    assert keys(result.preempted) == [f"default/{name}" for name in expected]
    assert keys(result.admitted) == ["default/a1"]
    assert used(engine) == {"pool": 8 - sum(v[1] for v in victims if v[0] in expected) + ask,
                            "a": ask, "b": 8 - sum(v[1] for v in victims if v[0] in expected)}


def test_a_reclaim_says_who_took_what_and_why() -> None:
    engine = borrowed_pool([("b1", 4, 0, 0), ("b2", 4, 0, 1)])
    engine.set_unit(unit("a1", 4, "a", created=100))
    [preemption] = engine.schedule(100.0).preempted
    assert preemption.unit == "default/b2" and preemption.quota == "b" and preemption.preemptor == "default/a1"
    assert preemption.reason == (
        "preempted: quota b used 8 nvidia.com/gpu, more than its runtime share 4; "
        "quota a reclaimed it for default/a1"
    )
    status = engine.standing("default/b2")
    assert status is not None and status.message.startswith(preemption.reason)
    assert "queued again in" in status.message


def test_protected_victims_are_passed_over() -> None:
    engine = borrowed_pool([("b1", 4, 0, 0), ("b2", 4, 0, 30)])
    engine.set_unit(unit("a1", 4, "a", created=70))
    result = engine.schedule(70.0)
    # b2 is the most recent, but protected until 90; b1 (admitted at 0) is not.
    assert keys(result.preempted) == ["default/b1"]


def test_when_every_victim_is_protected_the_engine_wakes_up_when_protection_ends() -> None:
    engine = borrowed_pool([("b1", 4, 0, 10), ("b2", 4, 0, 20)])
    engine.set_unit(unit("a1", 4, "a", created=30))
    result = engine.schedule(30.0)
    assert result.preempted == [] and result.admitted == []
    assert result.next_wakeup == 10 + PROTECT
    result = engine.schedule(10 + PROTECT)
    assert keys(result.preempted) == ["default/b1"] and keys(result.admitted) == ["default/a1"]


def test_a_unit_that_waits_only_for_its_victims_protect_time_says_so() -> None:
    engine = borrowed_pool([("b1", 4, 0, 10), ("b2", 4, 0, 20)])
    engine.set_unit(unit("a1", 4, "a", created=30))
    engine.set_unit(unit("a2", 4, "a", created=31))  # behind it, the same request
    told = engine.schedule(31.0).messages
    said = "; units it could preempt for room have run less than the protect time (1m, protectSeconds)"
    for key in ("default/a1", "default/a2"):
        assert said in told[key], f"the message written to {key} says so"
        standing = engine.standing(key)
        assert standing is not None and said in standing.message, f"and so does {key}'s reason worked out now"
    engine.schedule(10 + PROTECT)
    standing = engine.standing("default/a1")
    assert standing is not None and standing.position is None  # admitted: b1 was taken back


def test_a_unit_with_nothing_it_could_ever_preempt_is_not_told_of_the_protect_time() -> None:
    # (Non-preemptible units stay within their quota's min: one of another quota is no
    # victim anyway. Here, a lower-priority one of its own quota with priority preemption.)
    a = quota("a", 4, 4)
    engine = engine_with(a, protect_seconds=PROTECT)
    engine.set_queue(queue_of(a, preemption=True))
    engine.set_unit(unit("keep", 4, "a", created=0, preemptible=False))
    engine.schedule(0.0)
    engine.set_unit(unit("a1", 4, "a", priority=9, created=1))
    assert engine.schedule(1.0).next_wakeup is None
    standing = engine.standing("default/a1")
    assert standing is not None and standing.message.startswith("waiting for quota a")
    assert "protect time" not in standing.message


def test_non_preemptible_units_are_never_victims() -> None:
    engine = engine_with(parent("pool", 8, 8), quota("a", 4, 8, "pool"), quota("b", 4, 8, "pool"),
                         protect_seconds=0.0)
    engine.set_unit(unit("keep", 4, "b", created=0, preemptible=False))
    engine.set_unit(unit("take", 4, "b", created=1))
    engine.schedule(1.0)
    engine.set_unit(unit("a1", 4, "a", created=2))
    assert keys(engine.schedule(2.0).preempted) == ["default/take"]
    engine.set_unit(unit("a2", 4, "a", created=3))
    result = engine.schedule(3.0)
    assert result.preempted == [] and result.admitted == []  # a is at its share; b keeps "keep"


def test_a_unit_whose_pods_all_succeeded_is_no_victim_of_reclaim_for_its_grace() -> None:
    """Its controller writes the end seconds later under load; preempting it meanwhile
    only makes that write fail and the end come later (issue 36's traced run)."""
    engine = borrowed_pool([("b1", 4, 0, 0), ("b2", 4, 0, 1)], done_grace_seconds=GRACE)
    engine.set_work_done("default/b2", True, 99.0)  # the most recent: the victim, were its work not done
    engine.set_unit(unit("a1", 4, "a", created=100))
    assert keys(engine.schedule(100.0).preempted) == ["default/b1"]
    engine.set_work_done("default/b1", True, 100.0)  # (not admitted any more: ignored)
    assert "default/b1" not in engine._ledger.done


def test_a_done_unit_that_never_ends_is_a_victim_again_after_its_grace() -> None:
    """A tenant's job whose controller never says it ended (a Job managed by no one, a bare
    pod of its label that succeeded) keeps no borrowed quota from being reclaimed: the
    preemptor waits out the grace, as a protect time, and is woken when it ends."""
    engine = borrowed_pool([("b1", 4, 0, 0), ("b2", 4, 0, 1)], done_grace_seconds=GRACE)
    engine.set_work_done("default/b1", True, 100.0)
    engine.set_work_done("default/b2", True, 100.0)
    engine.set_unit(unit("a1", 4, "a", created=100))
    result = engine.schedule(100.0)
    assert result.preempted == [] and result.admitted == []
    assert result.next_wakeup == 100.0 + GRACE
    engine.set_work_done("default/b2", True, 120.0)  # told again: its grace runs from the first time
    result = engine.schedule(100.0 + GRACE)
    assert keys(result.preempted) == ["default/b2"] and keys(result.admitted) == ["default/a1"]


def test_a_done_unit_is_passed_over_by_priority_preemption_until_a_pod_of_it_is_made_again() -> None:
    a = quota("a", 4, 4)
    engine = engine_with(a, protect_seconds=0.0, done_grace_seconds=GRACE)
    engine.set_queue(queue_of(a, preemption=True))
    engine.set_unit(unit("low", 4, "a", created=0))
    engine.schedule(0.0)
    engine.set_work_done("default/low", True, 1.0)
    engine.set_unit(unit("high", 4, "a", priority=9, created=1))
    result = engine.schedule(1.0)
    assert result.preempted == [] and result.admitted == []  # it waits for low's end
    assert result.next_wakeup == 1.0 + GRACE
    engine.set_work_done("default/low", False, 2.0)  # its job made a pod again (more completions)
    assert keys(engine.schedule(1.0 + GRACE).preempted) == ["default/low"]
    engine.set_work_done("default/low", True, 40.0)  # not admitted now: ignored
    assert "default/low" not in engine._ledger.done


@pytest.mark.parametrize(
    ("a_running", "ask", "reclaims"),
    [
        pytest.param(0, 4, True, id="within-its-share"),
        pytest.param(2, 2, True, id="up-to-its-share"),
        pytest.param(2, 4, False, id="would-borrow"),
    ],
)
def test_reclaim_only_up_to_the_preemptors_runtime_share(a_running, ask, reclaims) -> None:
    engine = engine_with(parent("pool", 8, 8), quota("a", 4, 8, "pool"), quota("b", 4, 8, "pool"),
                         protect_seconds=0.0)
    if a_running:
        engine.set_unit(unit("a-running", a_running, "a", created=0))
    for i in range(8 - a_running):
        engine.set_unit(unit(f"b{i}", 1, "b", created=1 + i))
    engine.schedule(1.0)
    engine.set_unit(unit("a1", ask, "a", created=20))
    result = engine.schedule(20.0)
    assert bool(result.preempted) is reclaims
    if not reclaims:
        assert "its parent quota pool has used 8 of max 8" in result.messages["default/a1"]


def test_quotas_within_their_share_are_not_victims() -> None:
    engine = engine_with(parent("pool", 9, 9), quota("a", 3, 9, "pool"), quota("b", 3, 9, "pool"),
                         quota("c", 3, 9, "pool"), protect_seconds=0.0)
    engine.set_unit(unit("b-own", 3, "b", created=0))  # b uses exactly its share
    for i in range(6):
        engine.set_unit(unit(f"c{i}", 1, "c", created=1 + i))  # c borrows a's part
    engine.schedule(1.0)
    engine.set_unit(unit("a1", 3, "a", created=10))
    result = engine.schedule(10.0)
    assert {p.quota for p in result.preempted} == {"c"} and len(result.preempted) == 3


def test_reclaim_can_be_switched_off() -> None:
    engine = borrowed_pool([("b1", 4, 0, 0), ("b2", 4, 0, 1)], reclaim=False)
    engine.set_unit(unit("a1", 4, "a", created=100))
    result = engine.schedule(100.0)
    assert result.preempted == [] and result.admitted == []


def test_reclaim_reaches_across_levels() -> None:
    """A borrower under another parent gives back what the preemptor's parent lent it."""
    engine = engine_with(
        parent("top", 8, 8),
        parent("left", 4, 8, parent="top"), quota("a", 4, 8, "left"),
        parent("right", 4, 8, parent="top"), quota("b", 4, 8, "right"),
        protect_seconds=0.0,
    )
    for i in range(4):
        engine.set_unit(unit(f"b{i}", 2, "b", created=i))
        engine.schedule(float(i))
    engine.set_unit(unit("a1", 4, "a", created=10))
    result = engine.schedule(10.0)
    assert keys(result.preempted) == ["default/b3", "default/b2"]
    assert keys(result.admitted) == ["default/a1"]


def test_reclaim_does_not_count_a_non_lending_victims_kept_min_as_freed() -> None:
    """Reclaiming a unit of a quota that does not lend frees only what it used above its
    min: the min is kept from its siblings again (found by test_min_is_honoured_after_reclaim,
    where the cluster ended at 5 of 4)."""
    engine = engine_with(
        quota("keeper", 1, 2, lend=False),
        parent("team", 2, 4, lend=False), quota("x", 0, 2, "team"), quota("y", 0, 2, "team"),
        capacity=4, protect_seconds=0.0,
    )
    engine.set_unit(unit("k1", 2, "keeper"))
    settle(engine, 0.0)
    engine.set_unit(unit("y1", 1, "y"))
    engine.set_unit(unit("y2", 1, "y"))
    assert settle(engine, 0.0) == ["default/y1", "default/y2"]
    engine.set_unit(unit("x1", 2, "x"))
    result = engine.schedule(0.0)
    # Without k1, 4 - 1 (keeper's kept min) - 2 leaves 1: y2 goes too.
    assert sorted(keys(result.preempted)) == ["default/k1", "default/y2"]
    assert keys(result.admitted) == ["default/x1"]
    assert used(engine)["team"] == 3


def test_the_worked_example_settles_after_reclaim() -> None:
    """SEMANTICS.md section 3: team d borrows everything, the others arrive later and take
    back their share by reclaim; admitted GPUs settle at the runtime quotas 5/20/35/40."""
    engine = engine_with(
        parent("pool", 60, 100),
        quota("a", 10, 100, "pool", 40), quota("b", 15, 100, "pool", 60),
        quota("c", 20, 100, "pool", 50), quota("d", 15, 100, "pool", 80),
        capacity=100, protect_seconds=PROTECT,
    )
    for i in range(14):
        engine.set_unit(unit(f"d{i}", 5, "d", created=i))
    engine.schedule(0.0)
    assert used(engine)["d"] == 70
    for name, demand in (("a", 5), ("b", 20), ("c", 40)):
        for i in range(demand // 5):
            engine.set_unit(unit(f"{name}{i}", 5, name, created=10 + i))
    now = 1.0
    for _ in range(30):
        now += PROTECT + 1
        engine.schedule(now)
    got = used(engine)
    assert (got["a"], got["b"], got["c"], got["d"]) == (5, 20, 35, 40)


class TestPriorityPreemptionInAQueue:
    def team(self, preemption: bool):  # type: ignore[no-untyped-def]
        team = quota("team", 0, 8)
        engine = engine_with(team, protect_seconds=0.0)
        engine.set_queue(queue_of(team, preemption=preemption))
        engine.set_unit(unit("low", 4, "team", priority=1, created=0))
        engine.set_unit(unit("mid", 4, "team", priority=5, created=1))
        engine.schedule(1.0)
        return engine

    def test_off_by_default(self) -> None:
        engine = self.team(preemption=False)
        engine.set_unit(unit("high", 4, "team", priority=9, created=2))
        result = engine.schedule(2.0)
        assert result.preempted == [] and result.admitted == []

    def test_lower_priority_gives_way(self) -> None:
        engine = self.team(preemption=True)
        engine.set_unit(unit("high", 4, "team", priority=9, created=2))
        result = engine.schedule(2.0)
        assert keys(result.preempted) == ["default/low"]
        assert keys(result.admitted) == ["default/high"]
        assert result.preempted[0].reason == "preempted by default/high of higher priority (9) in quota team"

    def test_equal_priority_does_not(self) -> None:
        engine = self.team(preemption=True)
        engine.set_unit(unit("peer", 4, "team", priority=1, created=2))
        result = engine.schedule(2.0)
        assert result.preempted == [] and result.admitted == []

    def test_non_preemptible_stays(self) -> None:
        team = quota("team", 4, 4)  # (a min: non-preemptible units stay within it)
        engine = engine_with(team, protect_seconds=0.0)
        engine.set_queue(queue_of(team, preemption=True))
        engine.set_unit(unit("low", 4, "team", priority=1, preemptible=False))
        engine.schedule(0.0)
        engine.set_unit(unit("high", 4, "team", priority=9, created=1))
        assert engine.schedule(1.0).preempted == []

    def test_protect_time_applies(self) -> None:
        team = quota("team", 0, 4)
        engine = engine_with(team, protect_seconds=PROTECT)
        engine.set_queue(queue_of(team, preemption=True))
        engine.set_unit(unit("low", 4, "team", priority=1))
        engine.schedule(0.0)
        engine.set_unit(unit("high", 4, "team", priority=9, created=1))
        result = engine.schedule(1.0)
        assert result.preempted == [] and result.next_wakeup == PROTECT
        assert keys(engine.schedule(PROTECT).preempted) == ["default/low"]


class TestBackoff:
    @pytest.mark.parametrize(("attempts", "base"), [(1, 10), (2, 20), (3, 40), (7, 640), (8, 900), (30, 900)])
    def test_doubles_from_10_s_up_to_15_min_with_10_percent_jitter(self, attempts: int, base: float) -> None:
        delays = [backoff_seconds(EngineConfig(), f"ns/unit-{i}", attempts) for i in range(50)]
        assert all(0.9 * base <= d <= 1.1 * base for d in delays)
        assert len(set(delays)) > 40  # spread out
        assert delays == [backoff_seconds(EngineConfig(), f"ns/unit-{i}", attempts) for i in range(50)]

    def test_a_sent_back_unit_waits_then_is_admitted_again(self) -> None:
        engine = engine_with(quota("team", 0, 8))
        engine.set_unit(unit("u", 1, "team"))
        engine.schedule(0.0)
        requeue_at = engine.requeue("default/u", 100.0, "pods did not start in time")
        assert 109.0 <= requeue_at <= 111.0
        result = engine.schedule(100.0)
        assert result.admitted == [] and result.next_wakeup == requeue_at
        standing = engine.standing("default/u")
        assert standing is not None and standing.position is None
        assert standing.message.startswith("pods did not start in time; queued again in")
        assert keys(engine.schedule(requeue_at).admitted) == ["default/u"]
        again = engine.requeue("default/u", 200.0, "again")
        assert 18.0 <= again - 200.0 <= 22.0
        info = engine.unit("default/u")
        assert info is not None and info.attempts == 2

    def test_a_preempted_unit_comes_back_after_its_backoff(self) -> None:
        engine = borrowed_pool([("b1", 4, 0, 0), ("b2", 4, 0, 1)])
        engine.set_unit(unit("a1", 4, "a", created=100))
        [preemption] = engine.schedule(100.0).preempted
        assert 109.0 <= preemption.requeue_at <= 111.0
        engine.remove_unit("default/a1")
        assert settle(engine, 101.0) == []  # room, but b2 waits out its back-off
        assert settle(engine, preemption.requeue_at) == ["default/b2"]
