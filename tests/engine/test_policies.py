"""Queue policies and the order of admission (SEMANTICS.md section 4)."""

from __future__ import annotations

import pytest

from koordqueue.api.constants import QueuePolicy
from koordqueue.engine import cycle, views
from koordqueue.engine.model import UnitInfo

from .builders import GPU, G, engine_with, keys, parent, queue_of, quota, settle, unit, used

BLOCK, PRIORITY, INTELLIGENT = QueuePolicy.BLOCK, QueuePolicy.PRIORITY, QueuePolicy.INTELLIGENT


def busy_team(policy: QueuePolicy, threshold: int | None = None, queue_threshold: int | None = None):  # type: ignore[no-untyped-def]
    """A quota of 8 GPUs with 4 of them in use."""
    team = quota("team", 0, 8, policy=policy, threshold=threshold)
    engine = engine_with(team)
    if queue_threshold is not None:
        engine.set_queue(queue_of(team, priority_threshold=queue_threshold))
    engine.set_unit(unit("running", 4, "team"))
    engine.schedule(0.0)
    return engine


# (name, GPUs, priority) in creation order; the running unit holds 4 of 8 GPUs.
BIG_THEN_SMALL = [("big", 6, 5), ("small", 2, 1)]


@pytest.mark.parametrize(
    ("policy", "units", "admitted", "told"),
    [
        pytest.param(PRIORITY, BIG_THEN_SMALL, ["small"], {"big": "asks 6, used 4 of max 8"}, id="priority-passes-over"),
        pytest.param(BLOCK, BIG_THEN_SMALL, [], {"small": "blocked behind default/big (Block policy of queue "
                                                          "koord-queue/team)"}, id="block-stops"),
        pytest.param(BLOCK, [("small", 2, 5), ("big", 6, 1)], ["small"], {}, id="block-admits-heads-that-fit"),
        pytest.param(INTELLIGENT, BIG_THEN_SMALL, [], {"small": "while high-priority default/big"},
                     id="intelligent-high-band-blocks-low-band"),
        pytest.param(INTELLIGENT, [("big", 6, 5), ("high-small", 2, 4)], [],
                     {"high-small": "blocked behind default/big"}, id="intelligent-high-band-is-block"),
        pytest.param(INTELLIGENT, [("big", 6, 3), ("small", 2, 1)], ["small"], {},
                     id="intelligent-low-band-is-priority"),
    ],
)
def test_policies(policy, units, admitted, told) -> None:
    engine = busy_team(policy)
    for i, (name, gpus, priority) in enumerate(units):
        engine.set_unit(unit(name, gpus, "team", priority=priority, created=1 + i))
    result = engine.schedule(1.0)
    assert keys(result.admitted) == [f"default/{name}" for name in admitted]
    for name, text in told.items():
        assert text in result.messages[f"default/{name}"]


@pytest.mark.parametrize("policy", [BLOCK, INTELLIGENT])
def test_a_blocked_queue_goes_on_when_something_changes(policy: QueuePolicy) -> None:
    engine = busy_team(policy)
    engine.set_unit(unit("big", 6, "team", priority=5, created=1))
    engine.set_unit(unit("small", 2, "team", priority=1, created=2))
    assert engine.schedule(1.0).admitted == []
    engine.remove_unit("default/running")  # a unit ends
    assert keys(engine.schedule(2.0).admitted) == ["default/big", "default/small"]


def test_a_blocked_queue_goes_on_when_its_quota_grows() -> None:
    engine = busy_team(BLOCK)
    engine.set_unit(unit("big", 6, "team", priority=5, created=1))
    engine.set_unit(unit("small", 2, "team", priority=1, created=2))
    assert engine.schedule(1.0).admitted == []
    engine.set_quota(quota("team", 0, 12, policy=BLOCK))
    assert keys(engine.schedule(2.0).admitted) == ["default/big", "default/small"]


@pytest.mark.parametrize(
    ("quota_threshold", "queue_threshold", "big_priority", "blocks"),
    [
        pytest.param(None, None, 4, True, id="default-4-at-threshold"),
        pytest.param(None, None, 3, False, id="default-4-below"),
        pytest.param(10, None, 5, False, id="quota-annotation"),
        pytest.param(10, 5, 5, True, id="queue-annotation-wins"),
        pytest.param(2, 10, 5, False, id="queue-annotation-wins-upward"),
    ],
)
def test_intelligent_threshold(quota_threshold, queue_threshold, big_priority, blocks) -> None:
    engine = busy_team(INTELLIGENT, threshold=quota_threshold, queue_threshold=queue_threshold)
    engine.set_unit(unit("big", 6, "team", priority=big_priority, created=1))
    engine.set_unit(unit("small", 2, "team", priority=1, created=2))
    admitted = keys(engine.schedule(1.0).admitted)
    assert admitted == ([] if blocks else ["default/small"])


def test_order_in_a_queue_is_priority_then_creation_then_namespace_and_name() -> None:
    team = quota("team", 0, 100, namespaces=("other",))
    engine = engine_with(team)
    units = [
        unit("late-high", 1, "team", priority=9, created=50),
        unit("b", 1, "team", priority=1, created=10),
        unit("a", 1, "team", priority=1, created=10),
        unit("a", 1, "team", priority=1, created=10, ns="other"),
        unit("early-low", 1, "team", priority=1, created=5),
        unit("lowest", 1, "team", priority=0, created=0),
    ]
    for u in units:
        engine.set_unit(u)
    positions = [s.unit for s in engine.queue_positions()["koord-queue/team"]]
    expected = ["default/late-high", "default/early-low", "default/a", "default/b", "other/a", "default/lowest"]
    assert positions == expected
    assert keys(engine.schedule(100.0).admitted) == expected
    standing = [engine.standing(k) for k in expected]
    assert all(s is not None and s.position is None for s in standing)


def test_queue_positions_are_one_based_and_follow_admissions() -> None:
    engine = engine_with(quota("team", 0, 2))
    for i in range(4):
        engine.set_unit(unit(f"u{i}", 1, "team", created=i))
    assert [s.position for s in engine.queue_positions()["koord-queue/team"]] == [1, 2, 3, 4]
    engine.schedule(0.0)
    rows = engine.queue_positions()["koord-queue/team"]
    assert [(s.unit, s.position) for s in rows] == [("default/u2", 1), ("default/u3", 2)]
    assert "asks 1, used 2 of max 2" in rows[0].message


def test_many_admissions_from_every_queue_in_one_cycle() -> None:
    engine = engine_with(*(quota(name, 0, 8) for name in "abc"))
    for name in "abc":
        for i in range(4):
            engine.set_unit(unit(f"{name}{i}", 2, name, created=i))
    result = engine.schedule(0.0)
    assert len(result.admitted) == 12
    assert used(engine) == {"a": 8, "b": 8, "c": 8}


def shared_pool(priority_a: int = 1000, priority_b: int = 1000, a_running: int = 0):  # type: ignore[no-untyped-def]
    """Quotas a and b share a pool of 4 GPUs; neither has a min, both may use all of it."""
    a, b = quota("a", 0, 4, "pool"), quota("b", 0, 4, "pool")
    engine = engine_with(parent("pool", 0, 4), a, b)
    engine.set_queue(queue_of(a, priority=priority_a))
    engine.set_queue(queue_of(b, priority=priority_b))
    for i in range(a_running):
        engine.set_unit(unit(f"a-running{i}", 1, "a", created=-1))
    engine.schedule(0.0)
    for name in "ab":
        for i in range(4):
            engine.set_unit(unit(f"{name}{i}", 1, name, created=i))
    return engine


@pytest.mark.parametrize(
    ("priority_a", "priority_b", "a_running", "expected"),
    [
        pytest.param(1000, 2000, 0, {"a": 0, "b": 4}, id="higher-queue-priority-first"),
        pytest.param(3000, 2000, 0, {"a": 4, "b": 0}, id="higher-queue-priority-first-either-way"),
        pytest.param(1000, 1000, 0, {"a": 2, "b": 2}, id="equal-priority-fair-share"),
        pytest.param(1000, 1000, 2, {"a": 2, "b": 2}, id="fair-share-counts-what-is-running"),
    ],
)
def test_order_across_queues(priority_a, priority_b, a_running, expected) -> None:
    engine = shared_pool(priority_a, priority_b, a_running)
    engine.schedule(1.0)
    got = used(engine)
    assert {"a": got["a"], "b": got["b"]} == expected


def test_fair_share_alternates_between_equal_queues() -> None:
    engine = shared_pool()
    order = keys(engine.schedule(1.0).admitted)
    assert order == ["default/a0", "default/b0", "default/a1", "default/b1"]


def test_a_unit_changed_while_queued_takes_its_new_place() -> None:
    engine = engine_with(quota("team", 0, 1))
    engine.set_unit(unit("first", 1, "team", created=0))
    engine.set_unit(unit("second", 1, "team", created=1))
    engine.set_unit(unit("second", 1, "team", priority=5, created=1))  # its priority was raised
    assert keys(engine.schedule(0.0).admitted) == ["default/second"]


def test_a_unit_asking_nothing_is_admitted() -> None:
    engine = engine_with(quota("team", 0, 0))
    engine.set_unit(UnitInfo("default", "empty", 0, 0.0, {}, quota_name="team"))
    assert keys(engine.schedule(0.0).admitted) == ["default/empty"]


class TestHolds:
    """Free room is held for a unit that waits for more of it, so that smaller units do
    not starve it; but only against those it should go before (SEMANTICS.md section 4,
    held room): units of lower priority at once, units of its own priority from other
    quotas once it has waited past its Queue's koord-queue/hold-room-after (600 s by
    default), units of higher priority never."""

    def pool(self):  # type: ignore[no-untyped-def]
        """A pool of 8 GPUs, 4 of them used by quota b; quotas a and b have no min."""
        engine = engine_with(parent("pool", 0, 8), quota("a", 0, 8, "pool"), quota("b", 0, 8, "pool"),
                             quota("c", 4, 8))
        engine.set_unit(unit("b-run", 4, "b"))
        engine.schedule(0.0)
        return engine

    def test_borrowers_of_lower_priority_from_other_quotas_are_kept_away(self) -> None:
        engine = self.pool()
        engine.set_unit(unit("a-big", 6, "a", priority=1, created=1))
        engine.set_unit(unit("b-small", 2, "b", created=2))
        result = engine.schedule(1.0)
        assert result.admitted == []
        assert result.messages["default/b-small"] == (
            "waiting for quota b: nvidia.com/gpu asks 2; the free 4 of quota pool is held for default/a-big, "
            "of higher priority (1 > 0)")
        engine.remove_unit("default/b-run")
        assert keys(engine.schedule(2.0).admitted) == ["default/a-big", "default/b-small"]

    def test_the_issue_16_pool_keeps_no_gpu_idle_for_an_equal_priority_unit_until_its_wait_is_long(self) -> None:
        """Parent P of 10 GPUs: team 1 runs 6 with no end, team 2's 6-GPU job (same priority)
        waits. Team 1's 2-GPU job was kept out by the room held for it, leaving 4 GPUs idle
        as long as the first job ran; now it goes. Once team 2's job has waited 10 minutes,
        the free room is held for it against team 1's next one, and the message says why."""
        engine = engine_with(parent("P", 0, 10), quota("team-1", 0, 10, "P"), quota("team-2", 0, 10, "P"))
        engine.set_unit(unit("t1-run", 6, "team-1"))
        assert settle(engine, 0.0) == ["default/t1-run"]
        engine.set_unit(unit("t2-big", 6, "team-2", created=1))
        assert settle(engine, 1.0) == []
        engine.set_unit(unit("t1-small", 2, "team-1", created=2))
        assert settle(engine, 2.0) == ["default/t1-small"]
        result = engine.schedule(3.0)
        assert result.next_wakeup == 601.0  # team 2's job will have waited 600 s: its room is held anew
        assert settle(engine, 601.0) == []
        engine.set_unit(unit("t1-late", 2, "team-1", created=602))
        assert settle(engine, 602.0) == []
        standing = engine.standing("default/t1-late")
        assert standing is not None and standing.message == (
            "waiting for quota team-1: nvidia.com/gpu asks 2; the free 2 of quota P is held for default/t2-big, "
            "of the same priority (0), which has waited more than 10m (koord-queue/hold-room-after of its Queue)")
        engine.remove_unit("default/t1-small")
        engine.remove_unit("default/t1-run")
        assert sorted(settle(engine, 603.0)) == ["default/t1-late", "default/t2-big"]

    def test_the_wait_is_the_holders_queues_annotation(self) -> None:
        """koord-queue/hold-room-after on team 2's Queue: 0s holds at once, 1m after a minute."""
        for after, kept_out_from in ((0.0, 1.0), (60.0, 61.0)):
            team2 = quota("team-2", 0, 10, "P")
            engine = engine_with(parent("P", 0, 10), quota("team-1", 0, 10, "P"), team2)
            engine.set_queue(queue_of(team2, hold_room_after=after))
            engine.set_unit(unit("t1-run", 6, "team-1"))
            engine.set_unit(unit("t2-big", 6, "team-2", created=1))
            settle(engine, 1.0)
            for when in (kept_out_from - 1, kept_out_from):
                if when < 1.0:
                    continue
                engine.set_unit(unit(f"t1-at-{when:g}", 1, "team-1", created=when))
                admitted = settle(engine, when)
                assert admitted == ([] if when >= kept_out_from else [f"default/t1-at-{when:g}"]), (after, when)

    def test_a_unit_of_higher_priority_is_never_kept_out(self) -> None:
        engine = self.pool()
        engine.set_unit(unit("a-big", 6, "a", created=1))
        settle(engine, 1.0)
        engine.set_unit(unit("b-urgent", 2, "b", priority=3, created=5000))
        assert settle(engine, 5000.0) == ["default/b-urgent"]  # a-big has waited long, but is below it

    def test_the_wait_counts_from_the_return_out_of_back_off(self) -> None:
        engine = engine_with(parent("P", 0, 10), quota("team-1", 0, 10, "P"), quota("team-2", 0, 10, "P"),
                             backoff_jitter=0.0)
        engine.set_unit(unit("t1-run", 6, "team-1"))
        engine.set_unit(unit("t2-big", 2, "team-2", created=0))
        assert settle(engine, 0.0) == ["default/t1-run", "default/t2-big"]
        back = engine.requeue("default/t2-big", 700.0, "pods did not start")  # back at 710
        engine.set_unit(unit("t1-more", 2, "team-1", created=700))
        assert settle(engine, 700.0) == ["default/t1-more"]
        grown = engine.unit("default/t2-big")
        assert grown is not None
        grown.request = {GPU: 6 * G}
        engine.set_unit(grown)
        settle(engine, back)
        engine.set_unit(unit("t1-after", 2, "team-1", created=back + 1))
        assert settle(engine, back + 1) == ["default/t1-after"]  # created 700 s ago, but back in line 1 s ago

    def test_room_held_by_a_unit_that_waited_less_lets_in_those_the_last_holder_kept_out(self) -> None:
        """u6 (waited 10 minutes) holds the free room against pool-0's small job; then u5, ahead
        of it in its queue, comes back from a back-off and holds the same room, having waited
        only since: the small job fits now, and is let in (the room held was the same amount,
        which was all the engine once compared: the job waited with 4 GPUs idle)."""
        engine = engine_with(parent("pool", 0, 9), quota("pool-0", 0, 9, "pool"), quota("pool-1", 0, 9, "pool"),
                             backoff_jitter=0.0)
        engine.set_unit(unit("run", 5, "pool-0"))
        engine.set_unit(unit("u5", 7, "pool-1"))
        engine.set_unit(unit("u6", 7, "pool-1"))
        assert settle(engine, 0.0) == ["default/run"]
        back = engine.requeue("default/u5", 600.0, "pods did not start")
        assert settle(engine, 600.0) == []
        engine.set_unit(unit("small", 3, "pool-0", created=601))
        assert settle(engine, 601.0) == []
        standing = engine.standing("default/small")
        assert standing is not None and "held for default/u6, of the same priority (0)" in standing.message
        assert settle(engine, back) == ["default/small"]

    @pytest.mark.parametrize(("mate", "created"), [("mate", 3.0), ("a-mate", 1.0)])
    def test_room_held_for_a_unit_its_own_quota_now_keeps_out_is_let_go_at_once(self, mate: str,
                                                                                 created: float) -> None:
        """big (pool-0) holds the parent's free 3 against pool-1's small job; then a mate, of big's
        quota and priority, is admitted (behind big in its queue, or ahead of it), and big no
        longer fits its own quota: the room held for it is let go, and the small job, kept out by
        it, is let in in the same cycle (found by tests/engine/test_properties.py: it waited with
        2 GPUs idle, told they were held)."""
        engine = engine_with(parent("pool", 0, 8), quota("pool-0", 0, 8, "pool"), quota("pool-1", 0, 8, "pool"))
        engine.set_unit(unit("run-0", 1, "pool-0", priority=5))
        engine.set_unit(unit("run-1", 4, "pool-1", priority=1))
        assert settle(engine, 0.0) == ["default/run-0", "default/run-1"]
        engine.set_unit(unit("big", 7, "pool-0", priority=5, created=1))
        engine.set_unit(unit("small", 1, "pool-1", priority=1, created=2))
        assert settle(engine, 2.0) == []
        standing = engine.standing("default/small")
        assert standing is not None and "held for default/big, of higher priority (5 > 1)" in standing.message
        engine.set_unit(unit(mate, 1, "pool-0", priority=5, created=created))
        assert sorted(settle(engine, 3.0)) == sorted([f"default/{mate}", "default/small"])

    def test_lower_priority_units_of_its_own_quota_are_kept_away(self) -> None:
        engine = self.pool()
        engine.set_unit(unit("a-big", 6, "a", priority=5, created=1))
        engine.set_unit(unit("a-small", 2, "a", priority=1, created=2))
        result = engine.schedule(1.0)
        assert result.admitted == []
        assert "is held for default/a-big, of higher priority (5 > 1)" in result.messages["default/a-small"]

    def test_a_quota_within_its_share_is_not_kept_away(self) -> None:
        engine = engine_with(parent("pool", 8, 8), quota("a", 0, 8, "pool"), quota("b", 4, 8, "pool"))
        engine.set_unit(unit("a-run", 4, "a"))
        engine.schedule(0.0)
        engine.set_unit(unit("a-big", 6, "a", created=1))
        engine.set_unit(unit("b-own", 2, "b", created=2))
        assert keys(engine.schedule(1.0).admitted) == ["default/b-own"]

    def test_room_above_where_a_unit_lacks_room_is_not_held(self) -> None:
        """a-big waits for its parent p0 to have room; the cluster's free room is of no use
        to it meanwhile, so the quotas under p1 may use it (they once waited for each
        other's holds there, and nothing ran)."""
        engine = engine_with(
            parent("p0", 0, 4), quota("a", 0, 8, "p0"), quota("a2", 0, 8, "p0"),
            parent("p1", 0, 8), quota("b1", 0, 8, "p1"), quota("b2", 0, 8, "p1"),
            capacity=12,
        )
        engine.set_unit(unit("a-run", 2, "a"))
        engine.set_unit(unit("a2-run", 2, "a2"))
        engine.schedule(0.0)
        engine.set_unit(unit("a-big", 4, "a", created=1))
        result = engine.schedule(1.0)
        assert result.messages["default/a-big"] == (
            "waiting for quota a: nvidia.com/gpu asks 4; its parent quota p0 has used 4 of max 4"
        )
        engine.set_unit(unit("b1-job", 6, "b1", created=2))
        engine.set_unit(unit("b2-job", 6, "b2", created=3))
        assert keys(engine.schedule(2.0).admitted) == ["default/b1-job"]


def test_queues_woken_for_room_that_others_took_are_not_scanned_again(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A release wakes every queue waiting for that room; once the first takes it, the
    others' scans would end where their last ones did, so they are not made again (with
    thousands of queues waiting on the cluster this was most of a cycle), and they are
    woken again by the next room."""
    # team-00 is guaranteed the cluster's 8 GPUs: its unit goes first when they free up.
    teams = [quota(f"team-{i:02d}", 8 if i == 0 else 0, 8) for i in range(40)]
    engine = engine_with(*teams, capacity=8)
    engine.set_unit(unit("running", 8, "team-00"))
    assert settle(engine, 0.0) == ["default/running"]
    for i, team in enumerate(teams):
        engine.set_unit(unit(f"wants-{i:02d}", 8, team.name, created=1.0 + i))
    assert settle(engine, 1.0) == []
    checks = 0
    real = cycle.first_misfit  # (the same function in views.py: the reasons told)

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal checks
        checks += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(cycle, "first_misfit", counted)
    monkeypatch.setattr(views, "first_misfit", counted)
    engine.remove_unit("default/running")
    first = settle(engine, 2.0)
    assert first == ["default/wants-00"] and checks <= 3, (first, checks)  # 40 queues woken
    engine.remove_unit("default/wants-00")
    assert settle(engine, 3.0) == ["default/wants-01"]  # the others were woken by the next room
    waiting = [s for rows in engine.queue_positions().values() for s in rows]
    assert len(waiting) == 38 and all("waiting for cluster capacity" in s.message for s in waiting)
