"""Fairness over weeks: usage history, fair sharing by history, budgets (engine/fairness.py)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from koordqueue.api.fairness import Budget, parse_budgets
from koordqueue.api.objects import QuotaInfo
from koordqueue.engine import Engine
from koordqueue.engine.fairness import U0
from koordqueue.engine.history import MAX_BUCKETS, UsageHistory, Window
from tests.engine.builders import GPU, G, engine_with, keys, parent, quota, runtime, settle, unit

HOUR = 3600.0
WEEK = 168 * HOUR


# --- the history ------------------------------------------------------------------------
def test_decayed_sum_of_a_constant_use_is_exact() -> None:
    history = UsageHistory()
    history.want("a", WEEK, {})
    history.advance(0.0)
    history.set_rates("a", {GPU: 4 * G})
    history.advance(WEEK)  # one half-life: r tau (1 - 1/2)
    tau = WEEK / math.log(2)
    assert history.decayed("a")[GPU] == pytest.approx(4 * G * tau * 0.5)
    history.set_rates("a", {})
    history.advance(2 * WEEK)  # and it halves in the next, unused
    assert history.decayed("a")[GPU] == pytest.approx(4 * G * tau * 0.25)


def test_window_counts_the_span_only_and_says_when_use_ages_out() -> None:
    window = Window.over(10 * HOUR)
    assert window.width == 3 * 60.0  # whole minutes, at most MAX_BUCKETS buckets a window
    assert math.ceil(window.span / window.width) <= MAX_BUCKETS
    window.add(0.0, 2 * HOUR, 1000.0)  # one GPU for two hours
    assert window.total == pytest.approx(2 * HOUR * 1000)
    # Half of it ages out one window after the first hour ends.
    assert window.freed_at(HOUR * 1000, 5 * HOUR) == pytest.approx(11 * HOUR)
    window.trim(11 * HOUR)
    assert window.total == pytest.approx(HOUR * 1000)
    window.trim(12 * HOUR)
    assert window.total == 0.0


def test_history_survives_a_dump_and_refuses_a_hostile_copy() -> None:
    history = UsageHistory()
    history.want("a", WEEK, {GPU: 720 * HOUR})
    history.advance(0.0)
    history.set_rates("a", {GPU: 2 * G})
    history.advance(30 * HOUR)
    again = UsageHistory()
    assert again.load(history.dump()) is None
    assert again.decayed("a") == pytest.approx(history.decayed("a"), rel=1e-9)
    assert again.in_window("a", GPU) == pytest.approx(history.in_window("a", GPU))
    for hostile in ({"version": 1, "quotas": {"a": {"halfLife": -1, "decayed": {}, "windows": {}}}},
                    {"version": 1, "quotas": {"a": {"halfLife": 60, "decayed": {GPU: "nan"}, "windows": {}}}},
                    "nonsense", {"version": 99}):
        message = again.load(hostile)
        assert message is not None and "starts afresh" in message
    assert again.decayed("a")  # what it had is kept


# --- the annotations ---------------------------------------------------------------------
def test_budget_syntax() -> None:
    assert parse_budgets("nvidia.com/gpu=2000h/720h, cpu=100h/24h;exempt-min") == (
        Budget(GPU, 2000 * 3600 * 1000, 720 * HOUR), Budget("cpu", 100 * 3600 * 1000, 24 * HOUR, True))
    for bad, said in (("gpu", "resource=AMOUNT/WINDOW"), ("gpu=1h", "resource=AMOUNT/WINDOW"),
                      ("gpu=xh/1h", "not a duration"), ("gpu=1h/1s", "window"), ("gpu=1h/1h;nope", "unknown flag"),
                      ("gpu=1h/1h,gpu=2h/1h", "twice"), ("", "empty")):
        with pytest.raises(ValueError, match=said):
            parse_budgets(bad)


# --- fair sharing by history ------------------------------------------------------------
def _teams(fair: bool | None) -> tuple[QuotaInfo, QuotaInfo, QuotaInfo]:
    return (replace(parent("research", 16, 16), fair_sharing=fair), quota("a", 2, 16, parent="research"),
            quota("b", 2, 16, parent="research"))


def _history_then_contention(fair: bool | None, **config: object) -> dict[str, int]:
    """Team a alone uses 12 GPUs for a day; then both ask for 16."""
    research, a, b = _teams(fair)
    engine = engine_with(research, a, b, capacity=16, **config)
    engine.set_unit(unit("a-early", 12, "a"))
    assert keys(engine.schedule(0.0).admitted) == ["default/a-early"]
    engine.remove_unit("default/a-early")
    engine.schedule(24 * HOUR)
    for team in ("a", "b"):
        for i in range(16):
            engine.set_unit(unit(f"{team}-{i}", 1, team, created=24 * HOUR + i))
    settle(engine, 24 * HOUR + 60)
    return runtime(engine)


def test_off_shares_by_weight_alone() -> None:
    shares = _history_then_contention(None)
    assert shares["a"] == shares["b"] == 8


def test_history_gives_the_spare_capacity_to_the_quota_that_used_less() -> None:
    shares = _history_then_contention(True)
    assert shares["a"] + shares["b"] == 16
    assert shares["b"] > 8 > shares["a"] >= 2  # min stays guaranteed


def test_effective_weights_follow_the_formula_and_do_not_compound_minute_after_minute() -> None:
    """w' = w / (u + U0) from each quota's own weight, however many minutes it is worked
    out again: dividing last minute's effective weight again drove the team that used a
    little more to 1 against 1000 within hours (and reclaim followed that split)."""
    research, a, b = _teams(True)
    engine = engine_with(research, a, b, capacity=16)
    engine.set_unit(unit("a-run", 4, "a"))
    engine.set_unit(unit("b-run", 2, "b"))
    settle(engine, 0.0)
    tau = 168 * HOUR / math.log(2)
    for minute in range(1, 6 * 60 + 1):  # six hours, scored once a minute
        engine.schedule(minute * 60.0)
    status = engine.fairness_status()
    used = {team: status[team]["decayed"][GPU] * HOUR / (16 * tau) for team in ("a", "b")}  # type: ignore[index]
    expected = (used["b"] + U0) / (used["a"] + U0)  # w'_a / w'_b, the same base weights
    weights = {team: status[team]["weight"][GPU] for team in ("a", "b")}  # type: ignore[index]
    assert weights["b"] == 1000
    assert weights["a"] == pytest.approx(1000 * expected, abs=1)
    assert 900 < weights["a"] < 1000  # a used twice as much for six hours of a week's half-life: a little less


def test_the_cluster_default_applies_and_a_parent_may_opt_out() -> None:
    assert _history_then_contention(None, fair_sharing=True)["b"] > 8
    assert _history_then_contention(False, fair_sharing=True)["b"] == 8


def test_beside_koord_scheduler_history_is_not_used() -> None:
    shares = _history_then_contention(True, koordinator=True)
    assert shares["a"] == shares["b"] == 8


# --- budgets -------------------------------------------------------------------------------
def _budgeted(budget: str) -> Engine:
    return engine_with(replace(quota("team", 8, 8), budgets=parse_budgets(budget)), capacity=8)


def test_a_job_past_the_budget_waits_and_is_admitted_when_use_ages_out() -> None:
    engine = _budgeted("nvidia.com/gpu=4h/10h")  # 4 GPU-hours in any 10 hours
    first = replace(unit("first", 2, "team"), expected_runtime=2 * HOUR)
    engine.set_unit(first)
    assert keys(engine.schedule(0.0).admitted) == ["default/first"]
    engine.remove_unit("default/first")
    engine.schedule(2 * HOUR)  # it ran 2 GPUs for 2 h: the budget is spent
    second = replace(unit("second", 1, "team", created=2 * HOUR), expected_runtime=HOUR)
    engine.set_unit(second)
    result = engine.schedule(2 * HOUR)
    assert result.admitted == []
    message = result.messages["default/second"]
    assert "waits for the budget of quota team" in message and "frees up in about" in message
    assert result.next_wakeup is not None and 10 * HOUR < result.next_wakeup <= 12 * HOUR
    # Nothing is admitted before then; at the time it names, it is.
    assert engine.schedule(result.next_wakeup - 600).admitted == []
    assert keys(engine.schedule(result.next_wakeup).admitted) == ["default/second"]


def test_a_job_larger_than_the_whole_budget_is_told_so() -> None:
    engine = _budgeted("nvidia.com/gpu=1h/10h")
    engine.set_unit(replace(unit("huge", 2, "team"), expected_runtime=HOUR))
    result = engine.schedule(0.0)
    assert result.admitted == [] and "more than the whole budget" in result.messages["default/huge"]


def test_exempt_min_lets_jobs_within_min_through() -> None:
    team = replace(quota("team", 2, 8), budgets=parse_budgets("nvidia.com/gpu=1h/10h;exempt-min"))
    engine = engine_with(team, capacity=8)
    engine.set_unit(replace(unit("small", 2, "team"), expected_runtime=5 * HOUR))
    engine.set_unit(replace(unit("more", 1, "team", created=1.0), expected_runtime=5 * HOUR))
    result = engine.schedule(0.0)
    assert keys(result.admitted) == ["default/small"]
    assert "waits for the budget" in result.messages["default/more"]


def test_status_shows_decayed_usage_and_budget_use() -> None:
    engine = _budgeted("nvidia.com/gpu=100h/10h")
    engine.set_unit(unit("one", 4, "team"))
    engine.schedule(0.0)
    engine.schedule(HOUR)
    status = engine.fairness_status()["team"]
    assert status["budgets"] == {GPU: {"used": pytest.approx(4.0), "amount": 100.0, "window": 10 * HOUR}}
    assert status["decayed"][GPU] == pytest.approx(4.0, rel=0.01)  # type: ignore[index]


def test_the_forecast_plays_budgets_forward_from_the_same_history() -> None:
    from koordqueue.engine.forecast import clone

    engine = _budgeted("nvidia.com/gpu=4h/10h")
    engine.set_unit(replace(unit("first", 2, "team"), expected_runtime=2 * HOUR))
    engine.schedule(0.0)
    engine.remove_unit("default/first")
    engine.schedule(2 * HOUR)
    copy = clone(engine)
    copy.set_unit(replace(unit("second", 1, "team", created=2 * HOUR), expected_runtime=HOUR))
    assert copy.schedule(2 * HOUR).admitted == []  # the clone knows the budget is spent
    assert engine.fairness_status()["team"]["budgets"] == copy.fairness_status()["team"]["budgets"]


def test_the_budget_reason_is_said_afresh_as_time_passes() -> None:
    engine = _budgeted("nvidia.com/gpu=4h/10h")
    engine.set_unit(replace(unit("first", 2, "team"), expected_runtime=2 * HOUR))
    engine.schedule(0.0)
    engine.remove_unit("default/first")
    engine.set_unit(replace(unit("second", 1, "team", created=2 * HOUR), expected_runtime=HOUR))
    told = engine.schedule(2 * HOUR).messages["default/second"]
    assert told.endswith("frees up in about 8h30m")  # when the first half hour of use leaves the window
    engine.schedule(5 * HOUR)
    standing = engine.standing("default/second")
    assert standing is not None and standing.message.endswith("frees up in about 5h30m")


def _turns_when_room_frees(fair: bool | None) -> list[str]:
    """Team a alone used 12 GPUs for a day; then a quota outside ``research`` fills the
    cluster, both teams queue 16 one-GPU jobs, and 8 GPUs free up: who is admitted, in order."""
    research, a, b = _teams(fair)
    a, b = replace(a, min={}), replace(b, min={})  # (no min: the turns alone decide)
    other = quota("other", 0, 16)
    engine = engine_with(research, a, b, other, capacity=16, reclaim=False)
    engine.set_unit(unit("a-early", 12, "a"))
    settle(engine, 0.0)
    engine.remove_unit("default/a-early")
    engine.schedule(24 * HOUR)
    for i in range(16):
        engine.set_unit(unit(f"other-{i}", 1, "other"))
    settle(engine, 24 * HOUR)
    for team in ("a", "b"):
        for i in range(16):
            engine.set_unit(unit(f"{team}-{i}", 1, team, created=24 * HOUR + i))
    assert settle(engine, 24 * HOUR + 60) == []  # the cluster is full: both wait
    assert runtime(engine) == {"a": 6, "b": 10, "other": 0, "research": 16} if fair else {
        "a": 8, "b": 8, "other": 0, "research": 16}
    for i in range(8):
        engine.remove_unit(f"default/other-{i}")
    admitted = keys(engine.schedule(24 * HOUR + 120).admitted)
    return [key.split("/")[1].split("-")[0] for key in admitted]


def test_room_that_frees_up_goes_first_to_the_team_further_below_its_history_share() -> None:
    """No preemption, no more usage: only the order of the borrowers' turns. Off, equal
    shares alternate (a first, by name). By history (runtime 10 for b, which used less,
    6 for a), each turn goes to the team less far into its share, and of two at none yet,
    to the one with the larger effective weight: b first (a went first before the
    tie-break by weight), and b takes 5 of the 8 GPUs."""
    assert _turns_when_room_frees(None) == ["a", "b"] * 4
    assert _turns_when_room_frees(True) == ["b", "a", "b", "a", "b", "b", "a", "b"]
